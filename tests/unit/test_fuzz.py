"""The standing fuzz suite: every parser and loader that reads untrusted input, under Hypothesis.

The property everywhere: a clean result or the documented error, never another exception, never a
hang (Hypothesis' per-example deadline is the time bound), never a partial result reported as
complete. The fast profile (the default, derandomized so a run is reproducible) keeps the whole
file under a minute; `NPU_WATCHDOG_FUZZ=long` (or `make test-fuzz`) runs many more random examples.
"""

from __future__ import annotations

import json
import math
import os
import re
from datetime import timedelta

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.helpers import TESTS
from watchdog.parse import flight_recorder as fr  # noqa: E402
from watchdog.config import ConfigError, load_config_text  # noqa: E402
from watchdog.parse.heartbeat_format import HeartbeatFormatError, parse_heartbeat  # noqa: E402
from watchdog.logrules.matcher import Matcher, decode_line, re2_available  # noqa: E402
from watchdog.logrules.model import build_ruleset  # noqa: E402
from watchdog.npusmi.parse import NpuSmiError, NpuSmiParseError, parse_health, parse_info, parse_kv  # noqa: E402

_COMMON = dict(database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fast", max_examples=40, deadline=timedelta(seconds=5), derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=2000, deadline=timedelta(seconds=10), **_COMMON)
settings.load_profile(os.environ.get("NPU_WATCHDOG_FUZZ", "fast"))

FIX = TESTS / "fixtures"


# -- npu-smi --------------------------------------------------------------------------------------

def _tables():
    out = []
    for path in sorted((FIX / "npu-smi").glob("info_*.txt")):
        text = path.read_text(encoding="utf-8")
        try:
            out.append((path.name, text, parse_info(text)))
        except NpuSmiError:
            pass
    return out


TABLES = _tables()
OLD_FORMATS = ("20.", "22.")  # no process table: see test_npusmi_cuts.py and docs/guarantees.md
POISON = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "1e308", "9" * 5000, "1" * 25, "-0", "0x1F", "١٢"]
table = st.sampled_from(TABLES)


def _parse_or_error(text: str):
    try:
        return parse_info(text)
    except NpuSmiError:
        return None


@given(table, st.data())
def test_npu_smi_random_cut(t, data):
    name, text, full = t
    k = data.draw(st.integers(0, len(text)))
    obs = _parse_or_error(text[:k])
    if obs is None or obs == full:
        return
    cut = text[:k].rstrip()
    # The two documented limits (docs/guarantees.md): an old layout cut at a card separator, and a
    # process table without idle lines cut between two NPUs. Never fewer cards in a current layout.
    if full.version and full.version.startswith(OLD_FORMATS):
        assert cut.endswith("+"), name
        return
    assert cut.endswith("+") and obs.chips == full.chips, (name, k)
    assert "No running processes found" not in text and full.processes[:len(obs.processes)] == obs.processes


@given(table, st.lists(st.tuples(st.integers(0, 10 ** 6), st.sampled_from("del ins rep".split()),
                                 st.sampled_from(list("|+-= \n\r\t/0123456789.aZ") + ["\x00", "é", "\ufeff"])),
                       min_size=1, max_size=6))
def test_npu_smi_mutations_never_lose_a_card_silently(t, edits):
    name, text, full = t
    chars = list(text)
    for pos, op, ch in edits:
        i = pos % (len(chars) + 1)
        if op == "del" and i < len(chars):
            del chars[i]
        elif op == "ins":
            chars.insert(i, ch)
        elif i < len(chars):
            chars[i] = ch
    obs = _parse_or_error("".join(chars))
    if obs is not None:
        assert len(obs.chips) >= len(full.chips) or full.version.startswith(OLD_FORMATS), name


@given(table, st.data())
def test_npu_smi_poisoned_numbers(t, data):
    name, text, full = t
    spots = [m for m in re.finditer(r"(?<=\s)\d+(?:\.\d+)?(?=\s)", text)]
    m = data.draw(st.sampled_from(spots))
    value = data.draw(st.sampled_from(POISON))
    obs = _parse_or_error(text[:m.start()] + value + text[m.end():])
    if obs is not None:
        assert len(obs.chips) == len(full.chips)
        for c in obs.chips:
            for v in (c.power_w, c.temp_c, c.aicore_util_pct):
                assert v is None or math.isfinite(v)


@given(table)
def test_npu_smi_crlf_and_utf16(t):
    name, text, full = t
    assert parse_info(text.replace("\n", "\r\n")) == full
    utf16 = text.encode("utf-16").decode("utf-8", "replace")
    with pytest.raises(NpuSmiError):
        parse_info(utf16)


@given(st.text(max_size=3000))
def test_npu_smi_arbitrary_text(text):
    _parse_or_error(text)
    for fn in (parse_kv, parse_health):
        try:
            fn(text)
        except NpuSmiError:
            pass


@pytest.mark.parametrize("shape", ["tables", "one_line", "many_rows"])
def test_npu_smi_50_megabytes(shape):
    _, text, _ = TABLES[0]
    row = "| 0     910B3               | OK            | 97.9        34                0    / 0             |\n"
    big = {"tables": lambda: text * (50_000_000 // len(text)),
           "one_line": lambda: "|" + "x" * 50_000_000,
           "many_rows": lambda: text + row * (50_000_000 // len(row))}[shape]()
    with pytest.raises(NpuSmiParseError, match="more than any real table"):
        parse_info(big)


# -- heartbeat files -----------------------------------------------------------------------------

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 30, 10 ** 30),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_value = st.recursive(json_scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                                           max_size=4), max_leaves=20)
beat_obj = st.fixed_dictionaries({}, optional={k: json_value for k in (
    "step", "time", "loss", "grad_norm", "loss_scale", "tokens_per_s", "samples_per_s", "phase", "rank", "pid")})


def _beat_or_error(data: bytes):
    try:
        return parse_heartbeat(data)
    except HeartbeatFormatError:
        return None


@given(beat_obj)
def test_heartbeat_objects(obj):
    _beat_or_error(json.dumps(obj).encode())


@given(st.binary(max_size=2000))
def test_heartbeat_bytes(data):
    _beat_or_error(data)


@pytest.mark.parametrize("data,step", [(b'{"step": ' + b"9" * 5000 + b"}", None), (b'{"loss": ' + b"9" * 400 + b"}", None),
                                       (b"[" * 100_000, None),
                                       # a last line still being written: the complete one before it counts
                                       (b'{"step": 1}\n' + b"{" * 100_000, 1)])
def test_heartbeat_decoder_breakers(data, step):
    beat = _beat_or_error(data)
    assert (beat.step if beat else None) == step


@given(st.lists(st.integers(0, 10 ** 6), min_size=1, max_size=4), st.data())
def test_heartbeat_cut_is_never_a_newer_step(steps, data):
    text = "".join(json.dumps({"step": s, "time": 1700000000 + i, "loss": 1.5}) + "\n" for i, s in enumerate(steps))
    k = data.draw(st.integers(0, len(text)))
    beat = _beat_or_error(text[:k].encode())
    if beat is not None:
        assert beat.step in steps  # a whole line of what was written, never a half-line's numbers


# -- flight recorder rings ------------------------------------------------------------------------

def _ring(steps: int, capacity: int = 8) -> bytes:
    """A ring as the trainer package writes it (layout restated from docs/integrations/flight-recorder.md)."""
    import struct
    import zlib
    data = bytearray(fr.HEADER.pack(fr.MAGIC, fr.VERSION, 64, 96, capacity, 3, 4242, 0, steps, 1.7e9))
    data += bytes(capacity * 96)
    for seq in range(1, steps + 1):
        body = struct.pack("<qddddddqBBH", seq * 10, 1.7e9 + seq, 1.0 / seq, 3e-4, 0.5, 65536.0, 1000.0, 7, 1, 2, 127)
        off = 64 + ((seq - 1) % capacity) * 96
        data[off:off + 96] = struct.pack("<Q", seq) + body + struct.pack("<I", zlib.crc32(body)) + bytes(8) \
            + struct.pack("<Q", seq)
    return bytes(data)


RING = _ring(11)
RING_RECORDS = {(r["seq"], r["step"], r["loss"]) for r in fr.parse_ring(RING).records}


def _ring_or_error(data: bytes):
    try:
        return fr.parse_ring(data)
    except fr.RingFormatError:
        return None


@given(st.binary(max_size=3000))
def test_ring_random_bytes(data):
    _ring_or_error(data)
    _ring_or_error(fr.MAGIC + data)


@given(st.lists(st.tuples(st.integers(0, len(RING) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       st.integers(0, len(RING)))
def test_ring_mutations_never_invent_a_record(edits, cut):
    data = bytearray(RING)
    for pos, value in edits:
        data[pos] = value
    ring = _ring_or_error(bytes(data[:cut]))
    if ring is not None:  # whatever survives is a record that was written, never a mix
        assert {(r["seq"], r["step"], r["loss"]) for r in ring.records} <= RING_RECORDS
        assert len(ring.records) <= ring.header.capacity


# -- log bytes through the rule matcher ----------------------------------------------------------

RULES = build_ruleset()
ENGINES = ["re"] + (["re2"] if re2_available() else [])
MATCHERS = {e: Matcher(RULES, engine=e) for e in ENGINES}
LOG_PIECES = ["loss: nan", "Loss: NaN", "\x1b[31m", "\x1b[0m", "\x00", "ERROR", "HCCL", "EL0004", "out of memory",
              "Traceback (most recent call last):", "\r", "\n", "\xff", "a" * 300, "0123456789abcdef" * 100]


def _run_matcher(block: bytes) -> None:
    for matcher in MATCHERS.values():
        for start, end in matcher.candidates(block):
            assert 0 <= start <= end <= len(block)
            matcher.match_text(decode_line(block[start:end], matcher.max_line_bytes))


@given(st.binary(max_size=4000))
def test_log_random_bytes(block):
    _run_matcher(block)


@given(st.lists(st.sampled_from(LOG_PIECES), max_size=40))
def test_log_hostile_lines(pieces):
    _run_matcher("".join(pieces).encode("utf-8", "surrogateescape"))


def test_log_one_megabyte_line():
    _run_matcher(b"deadbeef" * 131072 + b" loss: nan\n")


# -- YAML configs --------------------------------------------------------------------------------

SECTIONS = ["node", "job", "paths", "http", "logging", "probes", "alerting", "snapshots", "stall", "trends"]
KEYS = SECTIONS + ["name", "enabled", "interval", "timeout", "channels", "commands", "sources", "paths",
                   "jitter", "url", "url_file", "max_total_size", "budget", "listen", "level", "argv", "type"]
yaml_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 40, 10 ** 40), st.floats(),
                        st.sampled_from(["30s", "5m", "1GiB", "${HOME}", "${NOPE}", "127.0.0.1:1", "", ".inf"]),
                        st.text(max_size=12))
yaml_value = st.recursive(yaml_scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(
    st.sampled_from(KEYS) | st.text(max_size=6), c, max_size=5), max_leaves=30)
YAML_NOISE = ["&a ", "*a", "<<: *a\n", "[", "]", "{", "}", ": ", "- ", "\t", "\x00", "!!python/object:os.system ",
              "? ", "|\n", "%YAML 1.1\n", "---\n", "...\n", "'", '"', "#", "\n  ", "9" * 60, "&b [*a, *a, *a]"]


def _config_or_error(text: str) -> None:
    try:
        load_config_text(text, "fuzz.yaml")
    except ConfigError as exc:
        assert "cannot load this config (" not in str(exc), f"a gap the loader has no message for: {exc}"


@given(st.dictionaries(st.sampled_from(SECTIONS), yaml_value, max_size=5))
def test_config_structures(doc):
    _config_or_error(yaml.safe_dump(doc))


@given(st.dictionaries(st.sampled_from(SECTIONS), yaml_value, max_size=4),
       st.lists(st.tuples(st.integers(0, 10 ** 6), st.sampled_from(YAML_NOISE)), min_size=1, max_size=6))
def test_config_mutated_text(doc, noise):
    text = yaml.safe_dump(doc)
    for pos, piece in noise:
        i = pos % (len(text) + 1)
        text = text[:i] + piece + text[i:]
    _config_or_error(text)


@given(st.integers(1, 12), st.integers(1, 12))
def test_config_alias_bombs(levels, fanout):
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fanout) + "]"
                               for i in range(1, levels)]
    _config_or_error("\n".join(lines) + "\n")


@given(st.integers(1, 3000), st.sampled_from(["[", "{a: ", "- ", "x:\n  "]))
def test_config_deep_nesting(depth, opener):
    _config_or_error("k: " + opener * depth + "\n")


@given(st.text(max_size=2000))
def test_config_arbitrary_text(text):
    _config_or_error(text)

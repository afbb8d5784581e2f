"""`engine: auto` runs stage 1 on the literal prefilter until it has read BULK_MIN_BYTES within
BULK_WINDOW seconds, then on RE2 (resident memory a quiet log never needs). Stage 1 only narrows the
lines stage 2 decides on (each path finds a superset), so the lines reported and their rules are
the same on both sides of the threshold and on every engine."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers import logged
from watchdog.logrules import corpus
from watchdog.logrules import matcher as matcher_module
from watchdog.logrules.matcher import BULK_MIN_BYTES, BULK_WINDOW, Matcher, decode_line, re2_available
from watchdog.logrules.model import build_ruleset

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
needs_re2 = pytest.mark.skipif(not re2_available(), reason="google-re2 is not installed in this interpreter")


def corpus_bytes() -> bytes:
    """Every annotated sample line (annotations cut off), as one log would hold them."""
    return b"".join(s.data for s in corpus.load(sorted(SAMPLES.glob("*/*.log"))))


def hits(m: Matcher, block: bytes, stop=None):
    """Where stage 2 reports a line, and the rules it reports it for."""
    out = []
    for s, e in m.candidates(block, stop):
        ids = [r.id for r in m.match_text(decode_line(block[s:e], m.max_line_bytes))]
        if ids:
            out.append((s, ids))
    return out


@pytest.fixture(scope="module")
def rules():
    return build_ruleset()


@needs_re2
def test_every_path_reports_the_same_lines_for_the_same_rules(rules):
    data = corpus_bytes()
    auto, re2, plain = Matcher(rules, "auto"), Matcher(rules, "re2"), Matcher(rules, "re")
    assert auto.engine == "re2"  # reported as such: RE2 serves a busy log
    checked = 0
    for start in range(0, len(data), 4096):  # slices of 4 KiB, cut at line ends
        end = data.find(b"\n", start + 4096)
        block = data[start:end + 1 if end >= 0 else len(data)]
        got = hits(auto, block)
        assert got == hits(re2, block) == hits(plain, block), block[:200]
        checked += len(got)
    assert checked > 300
    assert auto._bulk is not None  # 1 MB within a minute: RE2 took over on the way


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@needs_re2
def test_a_quiet_log_stays_on_the_literal_path_and_a_busy_minute_loads_re2(rules, monkeypatch):
    clock = Clock()
    # the matcher's own clock only (the global `time.monotonic` stays: other threads of the worker use it)
    monkeypatch.setattr(matcher_module, "time", SimpleNamespace(monotonic=clock))
    data = corpus_bytes()
    auto, plain = Matcher(rules, "auto"), Matcher(rules, "re")
    # 600 slices of 1 KiB, one every 10 s (100 minutes): never 64 KiB in a minute.
    for i in range(600):
        block = data[i * 1024:(i + 1) * 1024]
        assert hits(auto, block) == hits(plain, block)
        clock.now += 10.0
    assert auto._bulk is None
    # A minute with 64 KiB in it, in 1 KiB slices: the slice that reaches the threshold loads RE2.
    clock.now += BULK_WINDOW + 1
    for i in range(BULK_MIN_BYTES // 1024 - 1):
        auto.candidates(data[i * 1024:(i + 1) * 1024])
        clock.now += 0.5
    assert auto._bulk is None
    last = data[BULK_MIN_BYTES - 1024:BULK_MIN_BYTES]
    assert hits(auto, last) == hits(plain, last)
    assert auto._bulk is not None


@needs_re2
def test_one_burst_of_the_threshold_loads_re2_at_once(rules):
    data = corpus_bytes()
    assert len(data) > 4 * BULK_MIN_BYTES
    auto, plain = Matcher(rules, "auto"), Matcher(rules, "re")
    at = data[:BULK_MIN_BYTES]
    assert hits(auto, at) == hits(plain, at) != []
    assert auto._bulk is not None
    compiled = auto._bulk
    assert hits(auto, data) == hits(plain, data)
    assert auto._bulk is compiled  # compiled once


def test_a_stop_inside_the_block_is_honoured_on_both_paths(rules):
    line = b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"
    block = b"x" * (BULK_MIN_BYTES + 10) + b"\n" + line
    auto = Matcher(rules, "auto")
    assert auto.candidates(block, stop=BULK_MIN_BYTES + 11) == []
    start = BULK_MIN_BYTES + 11
    assert auto.candidates(block) == [(start, start + len(line) - 1)]
    assert auto.candidates(line) == [(0, len(line) - 1)]


def test_unknown_engine_is_refused(rules):
    with pytest.raises(ValueError, match="unknown engine"):
        Matcher(rules, "pcre")


def _user_rule(**kw):
    from watchdog.logrules.model import make_rule

    return make_rule(dict({"id": "mine", "category": "custom", "severity": "warning"}, **kw), "custom")


@needs_re2
def test_a_user_pattern_re2_rejects_leaves_the_literal_path_with_the_same_findings(rules):
    """Python takes `\\Z`, RE2 does not: the busy log's slice falls back to the literal path (said
    in the log) instead of failing every round from then on."""
    mine = _user_rule(patterns=[r"FATAL: worker died\Z"], literals=["fatal: worker died"])
    auto, plain = Matcher(rules + (mine,), "auto"), Matcher(rules + (mine,), "re")
    burst = b"iteration 1 | lm loss: 2.0\n" * 3000 + b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"
    with logged("watchdog.logrules.matcher", logging.WARNING) as records:
        assert hits(auto, burst) == hits(plain, burst) != []
    assert auto.engine == "re" and auto._bulk is None
    assert ["RE2 cannot compile the log rules" in r.getMessage() for r in records] == [True]
    line = b"FATAL: worker died"
    assert hits(auto, line) == hits(plain, line) == [(0, ["mine"])]


def test_a_literal_with_non_ascii_case_is_found_on_the_literal_path(rules):
    """Literals are folded with Unicode's lower case (`сбой узла`), the block with `bytes.lower()`,
    which folds ASCII only: the line as the user's pattern spells it is still a candidate (every
    non-ASCII line is, with such a rule)."""
    mine = _user_rule(patterns=["Сбой узла"], literals=["Сбой узла"])
    m = Matcher(rules + (mine,), "re")
    block = "iteration 1\nСбой узла 3\nok\n".encode("utf-8")
    assert hits(m, block) == [(12, ["mine"])]


def test_a_rule_without_literals_sees_non_ascii_text_on_the_literal_path(rules):
    """The bytes pass's `.` is one byte; the line is a candidate anyway, and stage 2 reads text."""
    mine = _user_rule(patterns=[r"NPU temperature \d+.C, throttling"])
    m = Matcher(rules + (mine,), "re")
    block = "NPU temperature 95°C, throttling\n".encode("utf-8")
    assert hits(m, block) == [(0, ["mine"])]

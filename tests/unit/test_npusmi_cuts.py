"""Cut and poisoned npu-smi tables: a parse failure, never fewer cards and never a traceback.

Every real capture in tests/fixtures/npu-smi is cut at every line end and at 200 seeded random
offsets. A cut table must either fail to parse or (when only trailing blanks were cut) give the
same observation as the whole table: a short read must never look like a lost card.
"""

from __future__ import annotations

import random

import pytest

from tests.helpers import TESTS
from watchdog.npusmi.parse import MAX_OUTPUT_CHARS, NpuSmiError, NpuSmiParseError, parse_info, parse_kv

FIX = TESTS / "fixtures" / "npu-smi"


def _tables():
    out = []
    for path in sorted(FIX.glob("info_*.txt")):
        text = path.read_text(encoding="utf-8")
        try:
            full = parse_info(text)
        except NpuSmiError:
            continue  # fragments and `-t` outputs: not whole tables
        out.append(pytest.param(text, full, id=path.name))
    return out


TABLES = _tables()
#: Versions older than this print no process table: a cut exactly after a card's separator line
#: cannot be told from a smaller node by the text alone (docs/guarantees.md says so).
OLD_FORMATS = ("20.", "22.")


def _cut_points(text: str, seed: int):
    line_ends = [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    rng = random.Random(seed)
    return sorted(set(line_ends + [rng.randrange(1, len(text)) for _ in range(200)]))


def test_every_real_table_is_in_the_cut_test():
    assert len(TABLES) >= 8


@pytest.mark.parametrize("text,full", TABLES)
def test_a_cut_table_is_a_parse_failure_never_fewer_cards(text, full):
    old = (full.version or "").startswith(OLD_FORMATS)
    accepted_short = []
    idle_lines = "No running processes found" in text
    for k in _cut_points(text, seed=len(text)):
        cut = text[:k]
        try:
            obs = parse_info(cut)
        except NpuSmiParseError:
            continue
        except NpuSmiError:
            continue
        if obs == full:
            continue
        if old and cut.rstrip().endswith("+") and len(obs.chips) < len(full.chips):
            accepted_short.append(k)  # the documented limit of the old layout
            continue
        if (obs.chips == full.chips and not idle_lines and cut.rstrip().endswith("+")
                and full.processes[:len(obs.processes)] == obs.processes):
            continue  # a process table without idle lines, cut between two NPUs: every card is there
        pytest.fail(f"cut at {k} of {len(text)} parsed as complete: {len(obs.chips)} chips "
                    f"(whole table: {len(full.chips)})\n...{cut[-200:]!r}")
    if not old:
        assert accepted_short == []


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999", "9" * 5000, "1" * 40])
def test_non_finite_and_huge_values_are_parse_failures(value):
    text = (FIX / "info_910B3_8card_25.2.0_procs.txt").read_text(encoding="utf-8")
    for field in ("97.9", "3408 / 65536", "1333928", "found in NPU 0 "):
        if field.startswith("found"):  # the idle line of the process table (found by the fuzz suite)
            if not value.isdigit():
                continue
            poisoned = text.replace(field, f"found in NPU {value} ", 1)
        else:
            poisoned = text.replace(field, value if "/" not in field else f"{value} / 65536", 1)
        with pytest.raises(NpuSmiParseError) as ei:
            parse_info(poisoned)
        assert "line" in str(ei.value)


def test_oversized_output_is_refused_before_parsing():
    text = (FIX / "info_910B3_8card_25.2.0_procs.txt").read_text(encoding="utf-8")
    with pytest.raises(NpuSmiParseError, match="more than any real table"):
        parse_info(text * (MAX_OUTPUT_CHARS // len(text) + 1))


def test_key_value_lines_with_long_blank_runs_parse():
    # The old `^([^:]*?)\s*:` took quadratic time on a long blank run without a colon.
    with pytest.raises(NpuSmiParseError):
        parse_kv("a" + " " * 200_000 + "b\n")
    assert parse_kv("Health Status" + " " * 50 + ": OK\n") == [("Health Status", "OK")]

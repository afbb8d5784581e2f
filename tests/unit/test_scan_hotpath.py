"""The scan hot path: a slice is matched up to `stop` without being copied, and its lines are
counted once; the answer is the one of the copied slice, on both engines."""

from __future__ import annotations

import pytest

from watchdog.logrules.extract import Extractor, StreamState
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import build_ruleset

ENGINES = ["re"] + (["re2"] if re2_available() else [])

NAN = b"{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}"
PLAIN = b"ordinary line 1\n" + NAN + b"\nordinary line 3\n"
COLOURED = b"\x1b[32mINFO\x1b[0m ordinary\n\x1b[1;31m" + NAN + b"\x1b[0m\nafter\n"
TORN = b"ordinary\x00\x00\n" + NAN.replace(b"loss", b"lo\x00ss") + b"\nend\n"
TAIL = b"partial " + NAN  # no newline: not a complete line yet


def events(engine, data, stop=None):
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    st = StreamState(line_no=0)
    got = [(e.rule.id, e.line_no) for e in ex.feed(st, data, 1.0, stop)]
    return got, st.line_no, st.lines_fed


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("body", [PLAIN, COLOURED, TORN], ids=["plain", "coloured", "nul"])
def test_a_slice_up_to_stop_is_the_copied_slice(engine, body):
    whole = events(engine, body)
    assert whole[0] == [("nan_loss_value", 2)] and whole[1] == 3 and whole[2] == 3
    # The partial line after `stop` is neither matched nor counted, whatever normalising removed.
    assert events(engine, body + TAIL, len(body)) == whole
    assert events(engine, body, len(body)) == whole  # stop at the very end


@pytest.mark.parametrize("engine", ENGINES)
def test_lines_are_counted_once_across_hits(engine):
    data = b"".join(b"line %d\n" % i if i % 7 else NAN + b"\n" for i in range(1, 200))
    got, line_no, fed = events(engine, data)
    assert [n for _, n in got] == [i for i in range(1, 200) if i % 7 == 0]
    assert line_no == fed == 199


@pytest.mark.parametrize("engine", ENGINES)
def test_scan_with_slices_matched_ahead_equals_one_serial_feed(engine, monkeypatch, tmp_path):
    """`scan` matches later slices in worker threads while it consumes earlier ones: same events,
    same line numbers and the same matched-line count as one feed of the whole file, also when a
    traceback and a coloured line straddle slice boundaries."""
    from watchdog.commands import scan as scan_cmd

    tb = b"Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nRuntimeError: x\n"
    parts = [b"line %d\n" % i if i % 11 else (NAN + b"\n" if i % 3 else tb) for i in range(1, 400)]
    data = b"".join(parts) + COLOURED
    log = tmp_path / "train.log"
    log.write_bytes(data)
    serial = Extractor(Matcher(build_ruleset(), engine=engine))
    want = [(e.rule.id, e.line_no, e.text) for e in serial.feed(StreamState(line_no=0), data, None)]
    monkeypatch.setattr(scan_cmd, "SLICE", 97)  # many slices, most lines cut by a slice end
    ahead = Extractor(Matcher(build_ruleset(), engine=engine))
    got = [(e["rule"], e["line"], e["text"]) for e in scan_cmd.scan_file(str(log), ahead)]
    assert sorted(got, key=lambda x: x[1]) == sorted(want, key=lambda x: x[1])
    assert len(want) > 30 and ahead.matched_lines == serial.matched_lines > 30

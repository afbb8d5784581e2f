"""Loss-scale collapse by trend: the pure judgement, its window, and the log rule that uses it."""

from __future__ import annotations

import pytest

from watchdog.logrules.extract import Extractor, StreamState
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import RuleError, build_ruleset, make_rule
from watchdog.core.losscale import UNTIMED_VALUES, ScaleTrack, ScaleTrend, collapsed

ENGINES = ["re"] + (["re2"] if re2_available() else [])
DS = ("[2023-06-07 22:{m:02d}:00,018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
      "Rank 0 Skipping step. Attempted loss scale: {a:g}, reducing to {b:g}")
DSDAY = ("[2023-06-08 {h:02d}:00:00,018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
         "Rank 0 Skipping step. Attempted loss scale: {a:g}, reducing to {b:g}")


def test_judgement_floor_fall_and_range():
    t = ScaleTrend()
    assert collapsed(t, 1.0, 8.0) and collapsed(t, 1e-51, 65536.0) and collapsed(t, float("nan"), None)
    assert collapsed(t, 0.5, None) and collapsed(t, 1e-51, None)
    # A scale that has been 1 all along is static (bf16, a MindFormers cell without loss scaling).
    assert not collapsed(t, 1.0, 1.0) and not collapsed(t, 1.0, None)
    assert not collapsed(t, float("inf"), None)
    assert collapsed(t, 2.0, 64.0)            # fell 32x, at the bottom of the range
    assert not collapsed(t, 4.0, 64.0)        # fell 16x only
    assert not collapsed(t, 2.0 ** 26, 2.0 ** 32)  # calibration: fell 64x, far above the range
    assert not collapsed(t, 256.0, 65536.0)   # fell 256x, still above `below`


def test_track_keeps_the_window_maximum_only():
    tr = ScaleTrack()
    assert tr.add(0.0, 64.0, 600) == 64.0
    for i, v in enumerate((32.0, 16.0, 8.0), 1):
        assert tr.add(i * 60.0, v, 600) == 64.0
    assert tr.add(700.0, 4.0, 600) == 16.0    # 64 (t=0) and 32 (t=60) left the window
    assert tr.peak(150.0) == 8.0
    # A rising scale replaces every smaller value: memory is bounded by the falling run.
    for i in range(1000):
        tr.add(800.0 + i, float(i), 600)
    assert len(tr._max) == 1
    # Without a clock the window is the last UNTIMED_VALUES values.
    un = ScaleTrack()
    un.add(None, 1e6, 0)
    for _ in range(UNTIMED_VALUES + 1):
        peak = un.add(None, 2.0, 0)
    assert peak == 2.0


@pytest.mark.parametrize("engine", ENGINES)
def test_deepspeed_64_to_2_fires_on_the_fifth_halving_only(engine):
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    lines = [DS.format(m=16 + 2 * i, a=64 / 2 ** i, b=32 / 2 ** i) for i in range(5)]
    events = ex.feed(StreamState(line_no=0), ("\n".join(lines) + "\n").encode(), None)
    assert [(e.rule.id, e.line_no) for e in events] == [("fp16_loss_scale_collapse", 5)]
    # The same halvings one every 11 minutes (a slow decline) still collapse: the window is 6 h.
    slow = [DS.format(m=i * 11, a=64 / 2 ** i, b=32 / 2 ** i) for i in range(5)]
    ex2 = Extractor(Matcher(build_ruleset(), engine=engine))
    assert [e.line_no for e in ex2.feed(StreamState(line_no=0), ("\n".join(slow) + "\n").encode(), None)] == [5]
    # Spread over more than the window (one halving every 2 hours), they never collapse.
    days = [DSDAY.format(h=i * 2, a=64 / 2 ** i, b=32 / 2 ** i) for i in range(5)]
    ex3 = Extractor(Matcher(build_ruleset(), engine=engine))
    assert ex3.feed(StreamState(line_no=0), ("\n".join(days) + "\n").encode(), None) == []


@pytest.mark.parametrize("engine", ENGINES)
def test_skipping_every_step_at_scale_1_collapses_at_once(engine):
    """DeepSpeed stuck at its minimum scale (`raise_error_at_min_scale` off): `Attempted loss scale:
    1, reducing to 1` on every step, seen by a daemon started mid-collapse (no higher value)."""
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    lines = [DS.format(m=10 + i, a=1, b=1) for i in range(3)]
    events = ex.feed(StreamState(line_no=0), ("\n".join(lines) + "\n").encode(), None)
    assert [e.line_no for e in events][:1] == [1]


def test_trend_rule_validation_is_specific():
    base = {"id": "my_scale", "category": "custom", "patterns": [r"scale=(?P<scale>\d+)"]}
    assert make_rule({**base, "trend": {"fall": 8, "below": 64, "window": "5m"}}, "custom").trend == \
        ScaleTrend(fall=8.0, below=64.0, floor=1.0, window=300.0)
    with pytest.raises(RuleError, match="captures the scale"):
        make_rule({**base, "patterns": [r"scale=\d+"], "trend": {}}, "custom")
    with pytest.raises(RuleError, match="without a threshold"):
        make_rule({**base, "trend": {}, "threshold": {"count": 2}}, "custom")
    with pytest.raises(RuleError, match="trend.fall"):
        make_rule({**base, "trend": {"fall": 0.5}}, "custom")
    with pytest.raises(RuleError, match="trend must be"):
        make_rule({**base, "trend": {"drops": 3}}, "custom")


def test_a_peak_from_a_later_run_is_not_this_runs():
    """Lines whose clock is more than a window behind the last one are another run's (two runs'
    logs in one file, a report pasting an older run under a newer one): the later run's peak
    must not make the older run's calibration look like a collapse (the eighteenth blind set:
    a 2023 run's 2^32 before a 2021 run's `reducing to 128.0`)."""
    tr = ScaleTrack()
    day = 86400.0
    assert tr.add(800 * day, 2.0 ** 32, 21600) == 2.0 ** 32
    assert tr.add(100 * day, 128.0, 21600) == 128.0          # two years earlier: its own run
    assert not collapsed(ScaleTrend(), 128.0, tr.add(100 * day + 60, 128.0, 21600))
    # A clock a little behind (ranks' lines interleaved, a skewed clock) keeps the window's peak.
    tr2 = ScaleTrack()
    tr2.add(1000.0, 4096.0, 21600)
    assert tr2.add(990.0, 64.0, 21600) == 4096.0


@pytest.mark.parametrize("engine", ENGINES)
def test_the_log_rule_does_not_carry_a_later_runs_peak_back(engine):
    older = ("[2021-05-25 07:07:52,792] [INFO] [stage3.py:2708:_overflow_clean_up] [deepscale] OVERFLOW! Rank 0 "
             "Skipping step. Attempted loss scale: 256, reducing to 128.0")
    lines = [DS.format(m=m, a=2.0 ** (33 - m), b=2.0 ** (32 - m)) for m in range(1, 18)] + [older]
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    st = StreamState()
    fired = [e.rule.id for line in lines for e in ex.feed(st, (line + "\n").encode(), None)]
    assert "fp16_loss_scale_collapse" not in fired, fired

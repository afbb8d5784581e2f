"""Tests of the shared series functions (detectors/series.py) on synthetic state (tests/synth.py)."""

from __future__ import annotations

import pytest

from tests.synth import Synth, T0, beats, logs, procs
from watchdog.detectors.series import (
    cpu_state,
    heartbeat_progress,
    job_phase,
    linear_slope,
    log_progress,
    max_drawdown,
    window_points,
)


# --- tests of the shared series functions ---------------------------------------------------------------

def test_window_points_reports_coverage():
    pts = [(0, "a"), (10, "b"), (20, "c")]
    assert window_points(pts, 15) == ([(10, "b"), (20, "c")], True)
    assert window_points(pts, -5) == ([(0, "a"), (10, "b"), (20, "c")], False)


def test_slope_and_drawdown():
    assert linear_slope([(0, 0.0), (10, 20.0), (20, 40.0)]) == pytest.approx(2.0)
    assert linear_slope([(5, 1.0)]) is None
    assert max_drawdown([1, 2, 2, 5, 5, 6]) == 0
    assert max_drawdown([1, 5, 2, 6, 3]) == 3


def test_heartbeat_progress_from_history_step_phase_and_touch_mode():
    s = Synth(probes=("heartbeat",))
    s.put("heartbeat", beats([1, 1], T0), T0)
    s.put("heartbeat", beats([2, 2], T0 + 10), T0 + 10)
    s.put("heartbeat", beats([2, 2], T0 + 20, phases=["checkpoint", "train"]), T0 + 20)
    s.put("heartbeat", beats([2, 2], T0 + 30, phases=["checkpoint", "train"]), T0 + 30)
    ranks = heartbeat_progress(s.view(T0 + 40))
    assert ranks[0].progress_at == T0 + 20  # phase change is progress
    assert ranks[1].progress_at == T0 + 10  # step change
    # A beat_time in the future (clock skew) never postpones: clamped to when it was read.
    s.put("heartbeat", beats([3, 3], T0 + 40, beat_time=T0 + 9999), T0 + 40)
    assert heartbeat_progress(s.view(T0 + 50))[1].progress_at == T0 + 40
    # Touch-only files (no step): each newer beat is progress.
    t = Synth(probes=("heartbeat",))
    t.put("heartbeat", beats([None], T0), T0)
    t.put("heartbeat", beats([None], T0 + 30), T0 + 35)
    assert heartbeat_progress(t.view(T0 + 60))[0].progress_at == T0 + 30


def test_job_phase_is_the_most_lenient_and_done_needs_every_rank():
    s = Synth(probes=("heartbeat",))
    s.put("heartbeat", beats([5, 5, 5], T0, phases=["checkpoint", "train", "train"]), T0)
    phases = s.config.stall.phases
    assert job_phase(heartbeat_progress(s.view(T0)), phases, 120.0) == ("checkpoint", 1800.0)
    s.put("heartbeat", beats([5, 5], T0 + 10, phases=["done", "train"]), T0 + 10)
    assert job_phase(heartbeat_progress(s.view(T0 + 10)), phases, 120.0) == ("train", 120.0)
    s.put("heartbeat", beats([5, 5, 5], T0 + 20, phases=["done", "done", "done"]), T0 + 20)
    assert job_phase(heartbeat_progress(s.view(T0 + 20)), phases, 120.0) == ("done", None)


def test_cpu_state_quiet_since_the_round_before_the_first_quiet_delta():
    s = Synth(probes=("process",))
    s.put("process", procs(2, None), T0)            # first sighting: no delta
    s.put("process", procs(2, 5.0), T0 + 10)        # 0.5 cpu-s/s: busy
    s.put("process", procs(2, 0.1), T0 + 20)        # 0.01: quiet
    s.put("process", procs(2, 0.1), T0 + 30)
    st = cpu_state(s.view(T0 + 30), 0.1)
    assert st.quiet_since == T0 + 10
    s.put("process", procs(2, 0.1, deltas={1: 3.0}), T0 + 40)  # one rank busy breaks the run
    assert cpu_state(s.view(T0 + 40), 0.1).quiet_since is None


def test_log_progress_counts_only_chosen_sources():
    s = Synth(probes=("logs",))
    s.put("logs", logs({}), T0)
    assert log_progress(s.view(T0 + 5), None) == T0  # nothing read yet: counts from the start
    s.put("logs", logs({"train": T0 + 20, "plog": T0 + 19}, {"train": 3, "plog": 1}), T0 + 20)
    assert log_progress(s.view(T0 + 25), None) == T0 + 20
    assert log_progress(s.view(T0 + 25), ["plog"]) == T0 + 19
    # New lines, but none of them a progress line (an error, a NaN report): no progress.
    s.put("logs", logs({"train": T0 + 30, "plog": T0 + 29}, {"train": 1, "plog": 2},
                       progress_at={"train": T0 + 20, "plog": T0 + 19}), T0 + 30)
    assert log_progress(s.view(T0 + 35), ["train"]) == T0 + 20
    assert log_progress(s.view(T0 + 35), None) == T0 + 20

"""Synthetic state for the trend and stall tests, and tests of the shared series functions.

Observations are put into a real StateStore at synthetic times; detectors read the real
StateView. Nothing here is mocked: only the clock is chosen by the test.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence

import pytest

from watchdog.config.schema import Config
from watchdog.detectors import npu as npu_det
from watchdog.detectors import stall as stall_det
from watchdog.detectors.series import (
    cpu_state,
    heartbeat_progress,
    job_phase,
    linear_slope,
    log_progress,
    max_drawdown,
    trailing_since,
    window_points,
)
from watchdog.findings import Finding
from watchdog.observations import (
    HeartbeatObservation,
    HeartbeatReading,
    LogObservation,
    NpuChip,
    NpuObservation,
    NpuProcess,
    ProcessInfo,
    ProcessObservation,
)
from watchdog.state import StateStore, StateView

T0 = 1_700_000_000.0
BASE = {"host": "node-a", "training_job": "job-a"}


def chip(npu: int, util: Optional[float] = 50.0, hbm: Optional[int] = 30000, total: Optional[int] = 65536,
         health: str = "OK", temp: Optional[float] = 50.0, chip_id: int = 0) -> NpuChip:
    return NpuChip(npu=npu, chip=chip_id, device_id=npu, name="910B3", health=health, power_w=90.0,
                   temp_c=temp, aicore_util_pct=util, memory_used_mb=0, memory_total_mb=0,
                   hbm_used_mb=hbm, hbm_total_mb=total, bus_id=f"0000:{npu:02x}:00.0")


def npu_obs(chips: Sequence[NpuChip], held: Optional[Iterable[int]] = None, codes=None,
            seen=()) -> NpuObservation:
    """`held`: NPU ids with a training process (default: every chip)."""
    held_ids = [c.npu for c in chips] if held is None else list(held)
    procs = tuple(NpuProcess(npu=n, chip=0, pid=1000 + n, name="python3", memory_mb=30000) for n in held_ids)
    return NpuObservation(version="23.0.6", chips=tuple(chips), processes=procs,
                          health_codes=dict(codes or {}),
                          missing=tuple(chip(n, chip_id=c) for n, c in seen if (n, c) not in {(x.npu, x.chip) for x in chips}))


def procs(n: int, cpu_delta: Optional[float], states: Optional[Dict[int, str]] = None,
          deltas: Optional[Dict[int, float]] = None) -> ProcessObservation:
    states = states or {}
    deltas = deltas or {}
    return ProcessObservation(processes=tuple(
        ProcessInfo(pid=1000 + r, rank=r, state=states.get(r, "sleeping"), create_time=T0 - 3600,
                    cpu_seconds=100.0, cpu_delta=deltas.get(r, cpu_delta), rss_bytes=1 << 30, threads=40)
        for r in range(n)), expected=n)


def beats(steps: Sequence[Optional[int]], t: float, phases: Optional[Sequence[Optional[str]]] = None,
          beat_time: Optional[float] = None) -> HeartbeatObservation:
    phases = phases or ["train"] * len(steps)
    return HeartbeatObservation(readings=tuple(
        HeartbeatReading(path=f"hb/rank{r}.json", rank=r, exists=True, mtime=t,
                         beat_time=t if beat_time is None else beat_time, step=s, phase=p)
        for r, (s, p) in enumerate(zip(steps, phases))))


def logs(last_line_at: Dict[str, float], lines: Optional[Dict[str, int]] = None,
         progress_at: Optional[Dict[str, float]] = None) -> LogObservation:
    """A log observation whose newest lines are progress lines (unless `progress_at` says otherwise)."""
    return LogObservation(events=(), last_line_at=dict(last_line_at), lines_read=dict(lines or {}),
                          progress_at=dict(last_line_at if progress_at is None else progress_at))


class Synth:
    """A StateStore plus a Config with the chosen probes enabled and up."""

    def __init__(self, probes: Sequence[str] = ("npu", "process", "heartbeat"), trends: Optional[dict] = None,
                 stall: Optional[dict] = None, history: float = 7200.0, log_sources=("train", "plog")):
        raw: dict = {"node": {"name": BASE["host"]}, "job": {"name": BASE["training_job"]}, "probes": {}}
        for p in probes:
            section: dict = {"enabled": True}
            if p == "heartbeat":
                section["paths"] = ["hb/rank*.json"]
            if p == "process":
                section["cmdline"] = r"pretrain_gpt\.py"
            if p == "logs":
                section["sources"] = [{"name": s, "paths": [f"{s}.log"]} for s in log_sources]
            raw["probes"][p] = section
        if trends:
            raw["trends"] = trends
        if stall:
            raw["stall"] = stall
        self.config = Config.model_validate(raw)
        self.store = StateStore(history_seconds=history, max_samples=100000)
        self.store.started_at = T0
        for p in probes:
            self.store.register(p, 10.0)
            self.store.update_status(p, up=True, runs_total=1)

    def put(self, probe: str, value, at: float) -> None:
        self.store.put(probe, value, at=at)

    def feed(self, start: float, end: float, every: float = 10.0, **fns: Callable[[float], object]) -> float:
        """Put fn(t) for each probe (npu=..., process=..., heartbeat=..., logs=...) at start, start+every,
        ... up to and including end (fn returning None skips the round). Returns the last time."""
        t = start
        last = start
        while t <= end + 1e-9:
            for probe, fn in fns.items():
                v = fn(t)
                if v is not None:
                    self.put(probe, v, t)
            last = t
            t += every
        return last

    def view(self, now: float) -> StateView:
        return self.store.view(now=now)

    def down(self, probe: str) -> None:
        self.store.update_status(probe, up=False, runs_total=5, last_error="npu-smi timed out")

    def npu(self, now: float) -> List[Finding]:
        return npu_det.detect(self.view(now), self.config)

    def stall(self, now: float) -> List[Finding]:
        return stall_det.detect(self.view(now), self.config)


def rules(findings: Iterable[Finding], rule: str) -> List[Finding]:
    return [f for f in findings if f.rule == rule]


# --- tests of the shared series functions ---------------------------------------------------------------

def test_trailing_since_takes_the_start_of_the_last_unbroken_run():
    pts = [(0, 1), (10, 0), (20, 1), (30, 1), (40, 1)]
    assert trailing_since(pts, lambda v: v == 1) == 20
    assert trailing_since(pts + [(50, 0)], lambda v: v == 1) is None
    assert trailing_since([], lambda v: True) is None


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

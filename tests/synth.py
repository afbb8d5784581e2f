"""Synthetic state for the trend, stall, cascade and pass-cost tests (a helper module, no tests).

Observations are put into a real StateStore at synthetic times; detectors read the real
StateView. Nothing here is mocked: only the clock is chosen by the test.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence

from watchdog.config.schema import Config
from watchdog.detectors import npu as npu_det
from watchdog.detectors import stall as stall_det
from watchdog.core.findings import Finding
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
from watchdog.core.state import StateStore, StateView
from watchdog.probes.logs import LogProbeObservation

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
    """A log observation whose newest lines are progress lines (unless `progress_at` says otherwise),
    the record the logs probe stores (`LOGS`)."""
    return LogProbeObservation(events=(), last_line_at=dict(last_line_at), lines_read=dict(lines or {}),
                          progress_at=dict(last_line_at if progress_at is None else progress_at))


class Synth:
    """A StateStore plus a Config with the chosen probes enabled and up."""

    def __init__(self, probes: Sequence[str] = ("npu", "process", "heartbeat"), trends: Optional[dict] = None,
                 stall: Optional[dict] = None, history: float = 7200.0, log_sources=("train", "plog"),
                 pace: Optional[dict] = None):
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
        if pace:
            raw["pace"] = pace
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

"""The cost of a detector pass does not grow with the history length.

Counted, not timed: every history sample a pass reads (iterated or indexed) is counted through a
tuple that counts, on synthetic data of the scale setup (64 ranks, 16 NPU chips, 20 log sources).
A pass after an hour of history must touch exactly as many samples as one after ten minutes,
with the ranks selected by explicit settings and with two jobs found by discovery (the shipped
default: the liveness, stall and log detectors then run once per job over a filtered view).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List

import pytest

from tests.synth import T0, Synth, chip, logs, npu_obs
from watchdog.detectors import IncrementalDetectors, load_detectors
from watchdog.observations import (HeartbeatObservation, HeartbeatReading, JobState, ProcessInfo,
                                   ProcessObservation)
from watchdog.core.state import StateView

RANKS, CHIPS, SOURCES = 64, 16, 20
#: Discovery: two jobs of 32 ranks each (None: ranks selected by explicit settings).
JOBS = ("pretrain-a", "pretrain-b")


class CountingHistory(tuple):
    """A history tuple that counts the samples read from it."""

    touched: List[int] = [0]

    def __iter__(self):
        for x in tuple.__iter__(self):
            self.touched[0] += 1
            yield x

    def __reversed__(self):
        for i in range(len(self) - 1, -1, -1):
            yield self[i]

    def __getitem__(self, i):
        got = tuple.__getitem__(self, i)
        if isinstance(i, slice):
            self.touched[0] += len(got)
        elif i not in (-1, len(self) - 1):  # the newest sample (view.latest) is not history
            self.touched[0] += 1
        return got


def counting(view: StateView) -> StateView:
    return replace(view, samples={k: CountingHistory(v) for k, v in view.samples.items()})


def job_of(r: int, discovered: bool):
    return JOBS[r % len(JOBS)] if discovered else None


def heartbeat(t: float, step: int, discovered: bool = False) -> HeartbeatObservation:
    return HeartbeatObservation(readings=tuple(
        HeartbeatReading(path=f"hb/rank{r}.json", rank=r, exists=True, mtime=t, beat_time=t, step=step,
                         phase="train", loss=2.0, loss_scale=65536.0 / (1 + step % 3), throughput=1000.0 + r,
                         throughput_unit="tokens_per_s", step_changed_at=t, job=job_of(r, discovered))
        for r in range(RANKS)))


def processes(t: float, discovered: bool = False) -> ProcessObservation:
    jobs = tuple(JobState(name=n, first_seen_at=T0, expected=RANKS // len(JOBS)) for n in JOBS) if discovered else ()
    return ProcessObservation(processes=tuple(
        ProcessInfo(pid=1000 + r, rank=r, state="disk-sleep" if r == 3 else "running", create_time=T0 - 10,
                    cpu_seconds=t - T0, cpu_delta=9.0, rss_bytes=1 << 30, threads=40, job=job_of(r, discovered))
        for r in range(RANKS)), expected=None if discovered else RANKS, first_seen_at=T0, jobs=jobs,
        discovered=discovered)


def feed(s: Synth, start: float, rounds: int, step0: int, discovered: bool = False) -> float:
    t = start
    names = [f"src{i}" for i in range(SOURCES)]
    for i in range(rounds):
        t = start + 10.0 * i
        s.put("npu", npu_obs([chip(n, util=1.0 if n == 0 else 60.0 + i % 7, hbm=30000 + i * 20 + n)
                              for n in range(CHIPS)]), t)
        s.put("process", processes(t, discovered), t + 1)
        s.put("heartbeat", heartbeat(t + 2, step0 + i, discovered), t + 2)
        s.put("logs", logs({n: t + 3 for n in names}, {n: 1 for n in names}), t + 3)
    return t


def samples_touched_by_next_pass(history_rounds: int, discovered: bool = False) -> Dict[str, int]:
    s = Synth(probes=("npu", "process", "heartbeat", "logs"), history=7200.0,
              log_sources=[f"src{i}" for i in range(SOURCES)])
    passes = IncrementalDetectors(load_detectors())
    end = feed(s, T0, history_rounds, 0, discovered)
    passes.run(s.view(end + 5), s.config)           # the daemon's passes have kept up so far
    end = feed(s, end + 10, 1, history_rounds, discovered)  # one new round of every probe
    CountingHistory.touched[0] = 0
    findings, errors = passes.run(counting(s.view(end + 5)), s.config)
    assert errors == []
    assert {"rank_disk_sleep", "npu_idle"} <= {f.rule for f in findings}
    if discovered:  # the rank in disk sleep is found by its own job's pass
        assert {f.labels.get("training_job") for f in findings if f.rule == "rank_disk_sleep"} == {JOBS[1]}
    return {"samples": CountingHistory.touched[0], "findings": len(findings)}


def test_a_pass_touches_as_many_samples_after_an_hour_as_after_ten_minutes():
    short = samples_touched_by_next_pass(60)     # 10 min of history
    long = samples_touched_by_next_pass(360)     # 1 h of history (the default)
    assert long["samples"] == short["samples"], (short, long)
    # The new round of each of the 4 probes, plus a constant number of look-ups.
    assert long["samples"] <= 4 * 2 + 8, long


def test_discovery_a_pass_touches_as_many_samples_after_an_hour_as_after_ten_minutes():
    """Two discovered jobs: each job's pass reads its own summaries, fed only the new samples."""
    short = samples_touched_by_next_pass(60, discovered=True)
    long = samples_touched_by_next_pass(360, discovered=True)
    assert long["samples"] == short["samples"], (short, long)
    # The node's look-ups plus, per job, the new round of its 3 filtered probes and its look-ups.
    assert long["samples"] <= 4 * 2 + 8 + len(JOBS) * (3 * 2 + 6), long


@pytest.mark.parametrize("discovered", [False, True], ids=["explicit", "discovery"])
@pytest.mark.parametrize("rounds", [30, 300])
def test_incremental_and_folded_summaries_agree(rounds, discovered):
    """The runner's summaries (fed sample by sample across passes; per job with discovery) give
    the findings that a fresh fold over the same history gives."""
    s = Synth(probes=("npu", "process", "heartbeat", "logs"), history=7200.0,
              log_sources=[f"src{i}" for i in range(SOURCES)])
    passes = IncrementalDetectors(load_detectors())
    t = T0
    for k in range(0, rounds, 10):
        t = feed(s, T0 + 10.0 * k, 10, k, discovered)
        passes.run(s.view(t + 5), s.config)
    got, _ = passes.run(s.view(t + 5), s.config)
    fresh, _ = IncrementalDetectors(load_detectors()).run(s.view(t + 5), s.config)
    key = lambda f: (f.rule, sorted(f.labels.items()), f.since, f.value)  # noqa: E731
    assert sorted(map(key, got)) == sorted(map(key, fresh))

"""Summary of the log probe: per source, the newest round that read complete lines."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

from watchdog.config.schema import Config
from watchdog.observations import HeartbeatObservation, JobState, LogObservation, ProcessObservation
from watchdog.core.state import Sample, StateView
from watchdog.summaries.pace import PaceTrack

PROBE = "logs"


class Summary:
    def __init__(self, config: Config):
        self.lines_at: Dict[str, float] = {}
        self.first_at: Optional[float] = None
        self.last: Optional[Sample] = None
        #: The job's pace and goodput, from its progress lines (watchdog.summaries.pace).
        self.pace = PaceTrack(config.pace)
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        """The pace adopts new thresholds; what it folded stays."""
        self.pace.cfg = config.pace
        self.pace.grace = float(config.probes.process.interval) + float(config.probes.jitter)

    def add(self, sample: Sample, view: StateView) -> None:
        obs = sample.value
        if not isinstance(obs, LogObservation):
            return
        if self.first_at is None:
            self.first_at = sample.time
        for src, n in obs.lines_read.items():
            if n > 0:
                self.lines_at[src] = max(self.lines_at.get(src, sample.time), sample.time)
        self.last = sample
        job = _job(view)
        if self.pace.first_at is None:
            self.pace.first_at = max(sample.time, job.first_seen_at if job is not None else sample.time)
        if job is not None and job.ended_at is not None and sample.time >= job.ended_at:
            self.pace.finish(job.ended_at, clean=job.end is None or not job.end.failure_line)
        self.pace.add(sample.time, obs.pace, _declared_phase(view))

    def progress(self, view: StateView, sources: Optional[Sequence[str]]) -> Optional[float]:
        """Newest time a counted source produced a complete line; before any line is seen, the
        time the probe started watching (the oldest round kept). None without data."""
        if self.last is None:
            return None
        wanted = set(sources) if sources is not None else None
        times = [at for src, at in self.lines_at.items() if wanted is None or src in wanted]
        for src, at in self.last.value.last_line_at.items():
            if wanted is None or src in wanted:
                times.append(min(at, self.last.time))
        return max(times) if times else self.first_at


def _job(view: StateView) -> Optional[JobState]:
    """The view's one discovered job, else None: the pace's goodput starts when it was first seen
    (not at the oldest log round the history still holds) and stops when it ended."""
    s = view.latest("process")
    if s is None or not isinstance(s.value, ProcessObservation) or len(s.value.jobs) != 1:
        return None
    return s.value.jobs[0]


#: Heartbeat phases that pause the steps on purpose (watchdog.summaries.pace books them so).
PAUSE_PHASES = ("checkpoint", "eval")


def _declared_phase(view: StateView) -> Optional[str]:
    """The pause phase a rank's heartbeat declares now (one rank writing a checkpoint while the
    others wait in a barrier is enough), else None."""
    s = view.latest("heartbeat")
    if s is None or not isinstance(s.value, HeartbeatObservation):
        return None
    phases = {r.phase for r in s.value.readings}
    return next((p for p in PAUSE_PHASES if p in phases), None)

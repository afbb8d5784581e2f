"""Summary of the log probe: per source, the newest round that read complete lines."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

from watchdog.config.schema import Config
from watchdog.observations import LogObservation
from watchdog.core.state import Sample, StateView
from watchdog.summaries.pace import PaceTrack, fold_round

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
        self.pace.configure(config)

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
        fold_round(self.pace, sample.time, obs.pace, view)

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


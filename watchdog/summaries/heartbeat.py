"""Per-rank summary of the heartbeat probe: progress, loss-scale and throughput windows.

Kept incrementally (one reading costs O(1) amortized), so the liveness and stall detectors no
longer walk every rank's hour of history on every pass.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple, Union

from watchdog.config.schema import Config
from watchdog.core.losscale import ScaleTrack
from watchdog.observations import HeartbeatObservation, HeartbeatReading
from watchdog.core.state import Sample, StateView
from watchdog.summaries.pace import PaceTrack, fold_round, heartbeat_lines
from watchdog.summaries.window import SplitMedian

PROBE = "heartbeat"

RankKey = Union[int, str]


def rank_key(r: HeartbeatReading) -> RankKey:
    return r.rank if r.rank is not None else r.path


def reading_time(sample_time: float, r: HeartbeatReading) -> float:
    """When the trainer wrote this reading: its own beat time, never later than when we read it
    (a clock-skewed future time must not postpone a stall)."""
    if r.beat_time is not None:
        return min(r.beat_time, sample_time)
    return sample_time


def _finite(v: Optional[float]) -> bool:
    return v is None or math.isfinite(v)


class RankTrack:
    """What the history says about one rank, folded reading by reading."""

    __slots__ = ("last_usable_at", "last", "state", "run_first", "scale", "throughput", "nan_first")

    def __init__(self) -> None:
        self.last_usable_at: Optional[float] = None
        self.last: Optional[HeartbeatReading] = None
        self.state: Optional[Tuple[Optional[int], Optional[str]]] = None
        self.run_first: float = 0.0
        #: The loss scale's window maximum (the trend judgement of watchdog.core.losscale).
        self.scale = ScaleTrack()
        self.throughput = SplitMedian()
        #: (time, step) of the first reading of the current run of non-finite loss/grad norm
        #: readings; None while the values are finite. Where a divergence began is where to roll
        #: back to, so the NaN alert names it, not the newest step.
        self.nan_first: Optional[Tuple[float, Optional[int]]] = None

    def add(self, t: float, r: HeartbeatReading, keep: float) -> None:
        if r.exists and r.error is None:
            state = (r.step, r.phase)
            if self.last_usable_at is None or state != self.state:
                self.state = state
                self.run_first = reading_time(t, r)
            self.last, self.last_usable_at = r, t
            if not _finite(r.loss) or not _finite(r.grad_norm):
                if self.nan_first is None:
                    self.nan_first = (reading_time(t, r), r.step)
            else:
                self.nan_first = None
        if r.loss_scale is not None and r.error is None:
            self.scale.add(t, r.loss_scale, keep)
        if r.throughput is not None and r.phase in (None, "train") and math.isfinite(r.throughput):
            self.throughput.append(t, r.throughput)
            self.throughput.drop_before(t - keep)

    @property
    def progress_at(self) -> float:
        """Last time the rank showed progress: its step or phase changed, or for a touch-only
        file without `step`, its newest beat."""
        last = self.last
        if last is not None and last.step is None and last.beat_time is not None and self.last_usable_at is not None:
            return reading_time(self.last_usable_at, last)
        return self.run_first

    def loss_scale_peak(self, start: float) -> Optional[float]:
        """Highest loss scale reported from `start` on (None when none was)."""
        return self.scale.peak(start)

    def throughput_baseline(self, now: float, window: float, sustained: float,
                            min_baseline: float) -> Optional[Dict[str, float]]:
        """Median of the baseline (window start .. now - sustained) and the largest recent value;
        None when the baseline is too short. O(log n) per point (see SplitMedian)."""
        w = self.throughput
        w.drop_before(now - window)
        w.split_at(now - sustained)
        n, span, median = w.baseline()
        recent = w.recent_max()
        if recent is None or n < 2 or span is None or median is None or span < min_baseline:
            return None
        return {"median": median, "recent_max": recent}


class Summary:
    """All ranks of the heartbeat probe."""

    def __init__(self, config: Config):
        self.ranks: Dict[RankKey, RankTrack] = {}
        #: The job's pace from its heartbeats' steps, for a job that prints no progress line
        #: (watchdog.detectors.pace prefers the logs' own).
        self.pace = PaceTrack(config.pace)
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        self.pace.configure(config)
        hb = config.probes.heartbeat
        #: How far back the windows must reach.
        self.keep = max(hb.loss_scale.window, hb.throughput.window)

    def add(self, sample: Sample, view: StateView) -> None:
        obs = sample.value
        if not isinstance(obs, HeartbeatObservation):
            return
        keep = self.keep + max(0.0, sample.time - view.now)
        for r in obs.readings:
            track = self.ranks.get(rank_key(r))
            if track is None:
                track = self.ranks[rank_key(r)] = RankTrack()
            track.add(sample.time, r, keep)
        fold_round(self.pace, sample.time, heartbeat_lines(sample.time, obs), view)

    def rank(self, r: HeartbeatReading) -> Optional[RankTrack]:
        return self.ranks.get(rank_key(r))

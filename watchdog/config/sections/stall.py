"""Config of the fused stall rule.

A job is stalled when, for `duration` (or the duration of the current heartbeat phase): no
progress AND no device activity AND the ranks' CPU time barely advancing. All times are wall
time, never probe rounds.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from pydantic import Field, field_validator

from watchdog.config.types import Duration, Size, StrictModel, parse_duration

#: Phases that legitimately stop step progress for a long time (the trainer declares them in its
#: heartbeat). `train`, and any phase not listed, use `duration`; `done` never stalls.
DEFAULT_PHASES = {"init": "30m", "checkpoint": "30m", "eval": "15m"}


class StallConfig(StrictModel):
    """Thresholds with documented defaults; all time-based."""

    #: Fuse progress, device activity and CPU into the `stall` verdict (collective hang, single
    #: rank, busy hang).
    enabled: bool = True
    #: How long all signals must stay quiet before the job is called stalled (train phase).
    duration: Duration = Field(default="2m")
    #: Per-phase durations (heartbeat `phase`), replacing `duration` while a rank reports the phase.
    #: Given keys are merged over the defaults (init 30m, checkpoint 30m, eval 15m).
    phases: Dict[str, Duration] = Field(default_factory=lambda: dict(DEFAULT_PHASES))
    #: A chip counts as idle below this AI Core percentage ...
    idle_below_pct: float = Field(default=5.0, ge=0, le=100)
    #: ... and as pegged (operator loop) at or above this one.
    busy_above_pct: float = Field(default=95.0, ge=0, le=100)
    #: HBM use that moves by less than this counts as unchanged.
    hbm_tolerance: Size = Field(default="32MiB")
    #: A rank's CPU time "barely advances" below this many CPU seconds per wall second (0.1 = a
    #: tenth of one core; MindCluster uses 5 s per 60 s).
    cpu_rate_below: float = Field(default=0.1, ge=0)
    #: Log sources (names from `probes.logs.sources`) whose new lines count as progress. Unset:
    #: every source. Name your training log here if other sources log on their own while hung.
    log_sources: Optional[List[str]] = None
    #: A rank counts as "behind" (and the stall as single_rank) only when its last step is at
    #: least this many steps below the others'. Ranks of a hung collective stop within a step of
    #: each other, and throttled heartbeats report steps a few apart anyway.
    rank_behind_steps: int = Field(default=3, ge=1, le=10**12)

    @field_validator("phases")
    @classmethod
    def _no_done(cls, v: Dict[str, float]) -> Dict[str, float]:
        if "done" in v:
            raise ValueError("phase 'done' never stalls and takes no duration")
        merged = {k: parse_duration(d) for k, d in DEFAULT_PHASES.items()}
        merged.update(v)
        return merged

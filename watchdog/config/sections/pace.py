"""Config of the job pace: the slowdown warning (`job_slowdown`) and the goodput accounting.

The pace is read from the progress lines the trainers already print (watchdog.parse.pace); no
setting is needed for it. All thresholds are wall time or ratios, never probe rounds.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from watchdog.config.types import Duration, StrictModel


class PaceConfig(StrictModel):
    """Defaults chosen so a sustained 15 % slowdown is named within about a minute (MindCluster's
    slow-node check needs about 90 s) while a checkpoint, an evaluation or a job's first minutes
    never are."""

    #: Follow each job's pace and warn (`job_slowdown`) when it stays slower than its baseline.
    enabled: bool = True
    #: A job whose median step time is this many percent above its baseline is slow ...
    slower_by_pct: float = Field(default=15.0, gt=0, le=1000)
    #: ... for this long (the warning's `for`; it resolves when the median is back within half
    #: the threshold).
    slow_for: Duration = Field(default="20s")
    #: The recent pace is the median step time over this window (and at least `min_steps` steps):
    #: at 1-6 s per step it holds 5-30 steps, and a median lets one long step pass.
    window: Duration = Field(default="30s")
    #: Fewest step times in the window before the pace is judged.
    min_steps: int = Field(default=5, ge=3, le=1000)
    #: The baseline is the median of the windows' medians over this long (a job 25 % slower than
    #: an hour ago is slow); windows judged slow are left out so a slowdown never becomes normal.
    baseline: Duration = Field(default="1h")
    #: The job's first minutes (compilation, caches, the data loader filling up) are not baseline
    #: and never slow.
    warmup: Duration = Field(default="3m")
    #: A gap between progress lines longer than `pause_steps` step times (and `pause_min`) is a
    #: pause, not a pace: a checkpoint, an evaluation, a stall or a restart. Goodput books it so.
    pause_steps: float = Field(default=5.0, ge=1)
    #: Shortest gap counted as a pause (a loaded node reads logs late by seconds).
    pause_min: Duration = Field(default="10s")
    #: A chip whose mean AI Core use over the window is this many points above the median of the
    #: job's other chips is busier than its peers: the suspect of a slowdown.
    busier_by_pct: float = Field(default=10.0, gt=0, le=100)

    @model_validator(mode="after")
    def _windows(self) -> "PaceConfig":
        if self.baseline < 2 * self.window:
            raise ValueError("baseline must hold at least two windows")
        return self

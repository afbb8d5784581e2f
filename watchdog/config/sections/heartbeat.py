"""Config of the heartbeat probe and its detectors. Every threshold is a duration, never a round count."""

from __future__ import annotations

from typing import List, Optional

from watchdog.compat import Literal  # 3.7: from typing_extensions

from pydantic import Field, model_validator

from watchdog.config.sections.common import ProbeSchedule
from watchdog.config.types import Duration, StrictModel


class StaleAfter(StrictModel):
    """Heartbeat age that is `heartbeat_stale`, by the phase the trainer declared.

    Generous where a rank legitimately goes quiet (start-up, evaluation, a 20-minute checkpoint),
    tight in `train`, where one step takes seconds.
    """

    #: Heartbeat age that raises `heartbeat_stale` while a rank declares phase `init` (start-up,
    #: data loading).
    init: Duration = Field(default="30m")
    #: Heartbeat age that raises `heartbeat_stale` in phase `train` (or the learned value, see
    #: `learn`).
    train: Duration = Field(default="5m")
    #: Heartbeat age that raises `heartbeat_stale` in phase `eval`.
    eval: Duration = Field(default="30m")
    #: Heartbeat age that raises `heartbeat_stale` in phase `checkpoint` (a long save is not a
    #: hang).
    checkpoint: Duration = Field(default="30m")
    #: Files without a phase (plain `touch` heartbeats) and unknown phases.
    default: Duration = Field(default="5m")

    def for_phase(self, phase: Optional[str]) -> float:
        if phase in ("init", "train", "eval", "checkpoint"):
            return float(getattr(self, phase))
        return float(self.default)


class LearnConfig(StrictModel):
    """Learned `train` threshold: largest gap between two step advances x factor, after a warm-up."""

    #: Learn the `train` threshold from the job's own step gaps instead of `stale_after.train`.
    enabled: bool = False
    #: Time in `train` before the learned value replaces `stale_after.train`.
    warmup: Duration = Field(default="30m")
    #: Step gaps that must have been measured before learning counts.
    min_gaps: int = Field(default=10, ge=1, le=100_000)
    #: Safety factor on the largest gap seen.
    factor: float = Field(default=5.0, ge=1.0)
    #: Bounds on the learned value (a tiny gap must not make a hair trigger).
    min: Duration = Field(default="1m")
    #: Upper bound of the learned value.
    max: Duration = Field(default="1h")

    @model_validator(mode="after")
    def _bounds(self) -> "LearnConfig":
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class LossScaleConfig(StrictModel):
    """`loss_scale_collapse`: the dynamic loss scale keeps halving until updates become meaningless."""

    #: At or below this value the scale has collapsed, however it got there.
    min: float = Field(default=1.0, ge=0)
    #: ... or it fell by at least 2^drops (this many halvings) from its highest value within
    #: `window` (judged on the values, not on how many readings fell) ...
    drops: int = Field(default=5, ge=1, le=1000)
    #: ... and it is now at or below this: the start-up calibration from 2^32 ends far above it.
    below: float = Field(default=128.0, gt=0)
    #: The window in which the scale's highest value is taken (see `drops`).
    window: Duration = Field(default="30m")


class ThroughputConfig(StrictModel):
    """`throughput_drop`: tokens/s (or samples/s) well below its recent median, for a while."""

    #: Fire below this fraction of the baseline median.
    ratio: float = Field(default=0.5, gt=0, lt=1)
    #: How far back the baseline median looks.
    window: Duration = Field(default="30m")
    #: The drop must hold this long (every reading in it below the line).
    sustained: Duration = Field(default="3m")
    #: Baseline must span at least this long before the rule judges.
    min_baseline: Duration = Field(default="5m")


class StragglerConfig(StrictModel):
    """`rank_straggler`: one rank far behind the others (needs two ranks or more)."""

    #: Step lag behind the most advanced rank.
    steps: int = Field(default=100, ge=1, le=10**12)
    #: ... or heartbeat this much older than the median of the other ranks.
    age: Duration = Field(default="3m")


class HeartbeatProbeConfig(ProbeSchedule):
    """Disabled until configured: a probe with nothing to watch reports nothing."""

    #: Read the ranks' heartbeat files (discovery feeds the paths when on).
    enabled: bool = False
    interval: Duration = Field(default="10s")
    #: Heartbeat files, by path or glob (one file per rank), e.g. /data/job/hb/rank*.json.
    paths: List[str] = Field(default_factory=list)
    #: auto: JSON when the file has content, modification time when it is empty (a `touch` file);
    #: json: content must be JSON; mtime: only the modification time counts.
    format: Literal["auto", "json", "mtime"] = "auto"
    stale_after: StaleAfter = Field(default_factory=StaleAfter)
    #: `heartbeat_no_progress` when the step has not advanced this long in `train` while the file
    #: keeps being written. Defaults to the (learned) `train` stale threshold.
    no_progress_after: Optional[Duration] = None
    #: `process_not_started` (heartbeat side) when no heartbeat file appeared this long after the
    #: daemon started; used only when the process probe is off.
    start_grace: Duration = Field(default="15m")
    #: `heartbeat_unreadable` when a file stays unreadable/half-written this long (one bad read is retried).
    unreadable_after: Duration = Field(default="2m")
    #: Heartbeat times further than this in the future are `heartbeat_clock_skew`.
    clock_skew_tolerance: Duration = Field(default="1m")
    learn: LearnConfig = Field(default_factory=LearnConfig)
    loss_scale: LossScaleConfig = Field(default_factory=LossScaleConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    straggler: StragglerConfig = Field(default_factory=StragglerConfig)

    @model_validator(mode="after")
    def _has_paths(self) -> "HeartbeatProbeConfig":
        if self.enabled and not self.paths:
            raise ValueError("enabled without paths: list the heartbeat files or globs")
        return self

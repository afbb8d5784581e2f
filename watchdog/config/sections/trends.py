"""Config of the NPU trend detectors: idle, busy-hang, low utilization, HBM growth, health,
missing chips and temperature.

Every threshold is a time (how long a condition must hold) or a level, never a count of probe
rounds, so changing `probes.npu.interval` does not change when an alert fires. Percentages are
AI Core percentages as npu-smi prints them (0-100).
"""

from __future__ import annotations

from typing import List, Optional

from watchdog.compat import Annotated

from pydantic import Field, model_validator

from watchdog.config.types import Duration, Size, StrictModel


class TrendsConfig(StrictModel):
    """Thresholds with documented defaults; all time-based."""

    #: Judge the NPU trends (idle, busy hang, low utilisation, HBM growth, health, temperature).
    enabled: bool = True
    #: The NPU ids (the `NPU` column of npu-smi) the job uses. Empty: the chips on which npu-smi
    #: lists a process; when its process table is empty everywhere (typical inside containers)
    #: and the process probe sees live ranks, every chip.
    npus: List[Annotated[int, Field(ge=0, le=4095)]] = Field(default_factory=list)

    #: npu_idle: AI Core below this percentage ...
    idle_below_pct: float = Field(default=5.0, ge=0, le=100)
    #: ... for this long, while a training process holds the chip (warning).
    idle_for: Duration = Field(default="10m")

    #: npu_busy_hang: AI Core at or above this percentage ...
    busy_above_pct: float = Field(default=95.0, ge=0, le=100)
    #: ... for this long while no progress is observed (heartbeat step / training log lines).
    busy_for: Duration = Field(default="10m")

    #: npu_low_util: mean AI Core below this percentage over `low_util_for` while training (warning:
    #: the input pipeline starves the NPU).
    low_util_below_pct: float = Field(default=30.0, ge=0, le=100)
    #: How long the mean AI Core use must stay below `low_util_below_pct` before `npu_low_util`.
    low_util_for: Duration = Field(default="10m")

    #: hbm_growth: the window over which HBM use is judged (needs that much history).
    hbm_window: Duration = Field(default="30m")
    #: Net rise over the window below which nothing is reported.
    hbm_min_growth: Size = Field(default="1GiB")
    #: A fall larger than this inside the window means saw-tooth (allocator caching), not a leak.
    hbm_drop_tolerance: Size = Field(default="256MiB")
    #: A growing chip whose predicted time until full is below this raises a warning ...
    hbm_eta_warning: Duration = Field(default="24h")
    #: ... and below this a critical finding.
    hbm_eta_critical: Duration = Field(default="15m")

    #: npu_missing: the number of chips this node must show (e.g. 8, or 16 on A3 with two dies per
    #: NPU). Unset: only chips seen before and gone now are reported.
    expected_chips: Optional[int] = Field(default=None, ge=1, le=1024)

    #: npu_temperature: at or above this many degrees Celsius ...
    temperature_warning_c: float = 90.0
    #: ... (critical at or above this) ...
    temperature_critical_c: float = 100.0
    #: ... for this long.
    temperature_for: Duration = Field(default="2m")

    @model_validator(mode="after")
    def _ordered(self) -> "TrendsConfig":
        if self.idle_below_pct >= self.busy_above_pct:
            raise ValueError("idle_below_pct must be below busy_above_pct")
        if self.hbm_eta_critical > self.hbm_eta_warning:
            raise ValueError("hbm_eta_critical must not exceed hbm_eta_warning")
        if self.temperature_critical_c < self.temperature_warning_c:
            raise ValueError("temperature_critical_c must not be below temperature_warning_c")
        return self

"""Config of the npu probe (filled in by its feature)."""

from __future__ import annotations

from pydantic import Field

from watchdog.config.sections.common import ProbeSchedule
from watchdog.config.types import Duration


class NpuProbeConfig(ProbeSchedule):
    """Disabled until configured: a probe with nothing to watch reports nothing."""

    enabled: bool = False
    interval: Duration = Field(default="10s")
    #: The npu-smi program (name on PATH or absolute path). Snapshots and doctor use it too.
    npu_smi: str = "npu-smi"
    #: Hard timeout of one npu-smi call; its process group is killed on expiry.
    command_timeout: Duration = Field(default="5s")

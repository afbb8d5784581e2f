"""Config of the npu probe: where npu-smi is, how long it may take, how often to ask for details."""

from __future__ import annotations

from pydantic import Field

from watchdog.config.sections.common import ProbeSchedule
from watchdog.config.types import Duration


class NpuProbeConfig(ProbeSchedule):
    """Disabled until configured: a probe with nothing to watch reports nothing.

    One `npu-smi info` per round carries health, power, temperature, AI Core %, memory and the
    process table of every card; `-t health` is asked only for chips whose health is not OK.
    """

    #: Run `npu-smi` every `interval` (utilisation, HBM, health, temperature per chip).
    enabled: bool = False
    interval: Duration = Field(default="10s")
    #: The npu-smi program (name on PATH or absolute path). Snapshots and doctor use it too.
    npu_smi: str = "npu-smi"
    #: Hard timeout of one npu-smi call; its process group is killed on expiry.
    command_timeout: Duration = Field(default="5s", gt=0)
    #: Minimum time between two `npu-smi info -t health` queries of the same unhealthy chip.
    health_interval: Duration = Field(default="1m", ge=0)
    #: At most this many `-t health` queries per round (the rest wait for the next rounds).
    max_health_queries: int = Field(default=4, ge=0, le=64)
    #: npu-smi failing (non-zero exit, failure text, unreadable output) for this long raises
    #: `npu_smi_failing`; a hang (`npu_smi_hung`) or a missing binary (`npu_smi_missing`) at once.
    failing_after: Duration = Field(default="30s", ge=0)

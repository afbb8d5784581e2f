"""Config of the heartbeat probe (filled in by its feature)."""

from __future__ import annotations

from typing import List

from pydantic import Field

from watchdog.config.sections.common import ProbeSchedule
from watchdog.config.types import Duration


class HeartbeatProbeConfig(ProbeSchedule):
    """Disabled until configured: a probe with nothing to watch reports nothing."""

    enabled: bool = False
    interval: Duration = Field(default="10s")
    #: Heartbeat files, by path or glob (one file per rank), e.g. /data/job/hb/rank*.json.
    paths: List[str] = Field(default_factory=list)

"""Config of the logs probe (filled in by its feature)."""

from __future__ import annotations

from typing import List

from pydantic import Field

from watchdog.config.sections.common import ProbeSchedule
from watchdog.config.types import Duration, StrictModel


class LogSource(StrictModel):
    """One configured log source: a name (metric label) and paths or globs."""

    name: str
    paths: List[str] = Field(min_length=1)


class LogsProbeConfig(ProbeSchedule):
    """Disabled until configured: a probe with nothing to watch reports nothing."""

    enabled: bool = False
    interval: Duration = Field(default="10s")
    sources: List[LogSource] = Field(default_factory=list)

"""Pieces every probe section shares."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from watchdog.config.types import Duration, StrictModel


class ProbeSchedule(StrictModel):
    """How often a probe runs and how long one round may take before it is declared hung."""

    enabled: bool = True
    #: Time between two rounds of this probe.
    interval: Duration = Field(default="10s")
    #: A round that takes longer is abandoned and the probe is reported down.
    timeout: Optional[Duration] = None

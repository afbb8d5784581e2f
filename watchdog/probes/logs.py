"""The logs probe (built by its feature; until then it builds nothing)."""

from __future__ import annotations

from typing import List

from watchdog.probes.base import Probe, ProbeContext


def build(ctx: ProbeContext) -> List[Probe]:
    return []

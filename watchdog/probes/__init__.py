"""Probe registry: each module listed here offers `build(ctx) -> list[Probe]`."""

from __future__ import annotations

import importlib
from typing import List

from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError

#: Modules whose `build` contributes probes, in the order they are scheduled.
PROBE_MODULES = (
    "watchdog.probes.process",
    "watchdog.probes.heartbeat",
    "watchdog.probes.npu",
    "watchdog.probes.logs",
    "watchdog.probes.command",
)


def build_probes(ctx: ProbeContext) -> List[Probe]:
    probes: List[Probe] = []
    for module in PROBE_MODULES:
        probes.extend(importlib.import_module(module).build(ctx))
    names = [p.name for p in probes]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"duplicate probe names: {sorted(dupes)}")
    return probes


__all__ = ["Collected", "Probe", "ProbeContext", "ProbeError", "build_probes", "PROBE_MODULES"]

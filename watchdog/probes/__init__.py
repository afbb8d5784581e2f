"""The probes: each module of this package with a `build(ctx) -> list[Probe]` and an `ORDER`
contributes probes, scheduled in `ORDER`. A probe module declares its config section (`SECTION`),
its metrics (`METRICS` and `samples(runtime)`, optional), its observation record and key, and
whether discovery feeds it (`SECTION.feed`); the composition root (`watchdog.plugins_list`) lists
the module and hands it down with `install`. docs/architecture.md has the checklist."""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from watchdog.core.plugins import Slot
from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError

#: The probe modules in schedule order, handed down by the composition root.
PROBE_MODULES: Slot[Tuple[Any, ...]] = Slot("the probe modules")


def install(modules: Sequence[Any]) -> None:
    """The probe modules (each with `build(ctx)` and `ORDER`), in schedule order."""
    PROBE_MODULES.fill(tuple(modules))


def probe_modules() -> Tuple[str, ...]:
    """Names of the modules that declare probes (`build` and `ORDER`), in schedule order."""
    return tuple(m.__name__ for m in PROBE_MODULES.get())


def build_probes(ctx: ProbeContext) -> List[Probe]:
    probes: List[Probe] = []
    for module in PROBE_MODULES.get():
        probes.extend(module.build(ctx))
    names = [p.name for p in probes]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"duplicate probe names: {sorted(dupes)}")
    return probes


__all__ = ["Collected", "Probe", "ProbeContext", "ProbeError", "build_probes", "install", "probe_modules"]

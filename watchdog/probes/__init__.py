"""Probe registry, derived: every module of this package with a `build(ctx) -> list[Probe]` and an
`ORDER` contributes probes, scheduled in `ORDER`. Adding a probe is adding one module: it declares
its config section (`SECTION`, which `watchdog.config.schema` finds), its metrics (`METRICS` and
`samples(runtime)`, which `watchdog.metrics.catalog` finds), its observation record, and whether
discovery feeds it (`SECTION.feed`); docs/architecture.md has the checklist."""

from __future__ import annotations

import importlib
import pkgutil
from typing import List, Tuple

# The config first: its schema imports every probe module to learn their sections, and a probe
# module imported before the config is complete would be found half-initialised.
import watchdog.config as _config_first  # isort: skip
from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError

del _config_first  # imported for its side effect only (above)

def probe_modules() -> Tuple[str, ...]:
    """Modules of this package that declare probes (`build` and `ORDER`), in schedule order."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if callable(getattr(mod, "build", None)) and isinstance(getattr(mod, "ORDER", None), int):
            found.append((mod.ORDER, mod.__name__))
    return tuple(name for _, name in sorted(found))


def build_probes(ctx: ProbeContext) -> List[Probe]:
    probes: List[Probe] = []
    for module in probe_modules():
        probes.extend(importlib.import_module(module).build(ctx))
    names = [p.name for p in probes]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"duplicate probe names: {sorted(dupes)}")
    return probes


__all__ = ["Collected", "Probe", "ProbeContext", "ProbeError", "build_probes", "probe_modules"]

"""Pieces every probe section shares, and how a probe module declares its section."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from pydantic import Field

from watchdog.config.types import Duration, StrictModel


class ProbeSchedule(StrictModel):
    """How often a probe runs and how long one round may take before it is declared hung."""

    enabled: bool = True
    #: Time between two rounds of this probe.
    interval: Duration = Field(default="10s")
    #: A round that takes longer is abandoned and the probe is reported down.
    timeout: Optional[Duration] = None


@dataclass(frozen=True)
class ProbeSection:
    """What a probe module declares about its config (`SECTION = ProbeSection(...)` beside its
    `ORDER` and `build`): the key under `probes:`, the model of that key, and whether discovery
    feeds the probe. `watchdog.config.schema` builds the `probes:` section from these, so a new
    probe is added by adding its module; nothing here or in the schema names it."""

    #: The key under `probes:` (e.g. `kernel`).
    key: str
    #: The section's type: a `StrictModel` (usually a `ProbeSchedule`), or e.g. a list of them.
    model: Any
    #: The key's line in the config reference when the model's docstring is not the right one.
    doc: str = ""
    #: Discovery can feed this probe (`discovery.feed`); the number orders the probes in the
    #: default `feed` list (None: discovery never feeds it).
    feed: Optional[int] = None
    #: Makes the section's default value (None: the model itself, called without arguments).
    default: Optional[Callable[[], Any]] = None
    #: Checks the validated section as a whole: raises ValueError, reported at `probes`.
    check: Optional[Callable[[Any], None]] = None

    def field(self) -> Tuple[Any, Any]:
        """(annotation, FieldInfo) for `pydantic.create_model`."""
        extra = {"description": self.doc} if self.doc else {}
        return self.model, Field(default_factory=self.default or self.model, **extra)


#: Where probe modules live: every module there with a `SECTION` contributes a key to `probes:`.
PROBE_PACKAGE = "watchdog.probes"


def probe_sections(package: str = PROBE_PACKAGE) -> Tuple[ProbeSection, ...]:
    """The `SECTION` of every probe module, in the modules' `ORDER` (the schedule's order).

    Found by name (importlib), not imported: the probes sit above the config and read it; the
    config only learns the sections they declare."""
    pkg = importlib.import_module(package)
    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{package}.{info.name}")
        section = getattr(mod, "SECTION", None)
        if isinstance(section, ProbeSection):
            found.append((getattr(mod, "ORDER", 0), mod.__name__, section))
    keys = [s.key for _, _, s in found]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ValueError(f"probe config section(s) declared twice: {', '.join(dupes)}")
    return tuple(s for _, _, s in sorted(found, key=lambda t: t[:2]))

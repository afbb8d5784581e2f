"""Pieces every probe section shares, and how a probe module declares its section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, Tuple, TypeVar

from pydantic import Field

from watchdog.config.types import Duration, StrictModel


class ProbeSchedule(StrictModel):
    """How often a probe runs and how long one round may take before it is declared hung."""

    enabled: bool = True
    #: Time between two rounds of this probe.
    interval: Duration = Field(default="10s")
    #: A round that takes longer is abandoned and the probe is reported down.
    timeout: Optional[Duration] = None


#: A probe section's model (the type `ProbeSection.of` returns).
M = TypeVar("M")


@dataclass(frozen=True)
class ProbeSection(Generic[M]):
    """What a probe module declares about its config (`SECTION = ProbeSection(...)` beside its
    `ORDER` and `build`): the key under `probes:`, the model of that key, and whether discovery
    feeds the probe. The composition root (`watchdog.plugins_list`) hands these to
    `watchdog.config.schema.install_probe_sections`, which builds the `probes:` section; nothing
    here or in the schema names a probe."""

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

    def of(self, config: Any) -> M:
        """This section of a loaded config, typed: `links.SECTION.of(config).flap_count` is
        checked by mypy where `config.probes.links.flap_count` (a model the composition root
        builds at run time) is not. The one read of `probes` by key, in the layer that owns it."""
        return getattr(config.probes, self.key)  # type: ignore[no-any-return]

    def field(self) -> Tuple[Any, Any]:
        """(annotation, FieldInfo) for `pydantic.create_model`."""
        extra = {"description": self.doc} if self.doc else {}
        return self.model, Field(default_factory=self.default or self.model, **extra)

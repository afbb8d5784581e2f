"""Incremental per-probe summaries that the detectors read instead of walking the history.

Each module of this package declares `PROBE` (the probe whose samples it folds) and a `Summary`
class: `Summary(config)`, `add(sample, view)`. The daemon's detector runner keeps one set of
summaries and feeds it only the samples that arrived since its last pass, so a pass costs the
same after a minute as after a day. A view without attached summaries (a test's synthetic view,
a one-off command) gets them folded from its own history on first use: the same code either way.

A reloaded config does not rebuild them (the daemon keeps only minutes of samples): thresholds
are asked per question, and `reconfigure(config)` adopts new windows and history lengths.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import logging

from watchdog.state import Sample, StateView

log = logging.getLogger(__name__)

_SKIP = ("window",)


def _modules() -> List[Any]:
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in _SKIP:
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "PROBE") and hasattr(mod, "Summary"):
            out.append(mod)
    return out


_REGISTRY: Optional[Dict[str, Any]] = None


def registry() -> Dict[str, Any]:
    """probe name -> Summary class, from the declarations of this package's modules."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = {m.PROBE: m.Summary for m in _modules()}
    return _REGISTRY


def fold(probe: str, view: StateView, config: Any) -> Any:
    """A fresh summary of `probe` folded over the view's whole history."""
    if config is None:
        from watchdog.config.schema import Config

        config = Config()
    summary = registry()[probe](config)
    for sample in view.history(probe):
        summary.add(sample, view)
    return summary


class Summaries:
    """The daemon's summaries, brought up to date with each view before a detector pass."""

    def __init__(self) -> None:
        self._config: Any = None
        self._by_probe: Dict[str, Any] = {}
        self._last: Dict[str, Sample] = {}
        #: Samples folded so far (all probes): what a pass costs beyond O(1) questions.
        self.folded = 0

    def attach(self, view: StateView, config: Any) -> StateView:
        """Fold the samples new since the last call and return the view carrying the summaries.
        A config change (or a history that lost the last folded sample) rebuilds from the view."""
        if config is not self._config:
            self._config = config
            for summary in self._by_probe.values():
                summary.reconfigure(config)
        for probe, cls in registry().items():
            hist = view.history(probe)
            last = self._last.get(probe)
            new, fresh = _new_samples(hist, last)
            summary = self._by_probe.get(probe)
            if summary is None or fresh:
                if summary is not None and last is not None:
                    log.warning("summary of %s restarted: samples were dropped before it read them", probe)
                summary = self._by_probe[probe] = cls(config)
            for sample in new:
                summary.add(sample, view)
            self.folded += len(new)
            if new:
                self._last[probe] = new[-1]
        return replace(view, summaries=dict(self._by_probe))


def _new_samples(hist: Tuple[Sample, ...], last: Optional[Sample]) -> Tuple[List[Sample], bool]:
    """The samples after `last` (walking back from the newest), and whether `last` was not found
    so everything must be folded afresh."""
    if last is None:
        return list(hist), True
    i = len(hist) - 1
    while i >= 0 and hist[i] is not last:
        i -= 1
    if i < 0:
        return list(hist), True
    return [hist[j] for j in range(i + 1, len(hist))], False

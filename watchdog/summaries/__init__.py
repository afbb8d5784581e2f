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

from dataclasses import replace
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import logging

from watchdog.config.schema import Config
from watchdog.core.plugins import Slot
from watchdog.core.state import Sample, StateView

log = logging.getLogger(__name__)

#: probe name -> its Summary class, from the summary modules' declarations (`PROBE`, `Summary`),
#: handed down by the composition root (`watchdog.plugins_list`).
SUMMARIES: Slot[Mapping[str, Any]] = Slot("the summaries")


def install(summaries: Mapping[str, Any]) -> None:
    SUMMARIES.fill(dict(summaries))


def registry() -> Mapping[str, Any]:
    """probe name -> Summary class, from the declarations of this package's modules."""
    return SUMMARIES.get()


def summary_of(view: StateView, probe: str, config: Any) -> Any:
    """The probe's summary for this view and config: the one the daemon's runner attached, else
    folded from the view's own history on first use (once per view). A function here, not a
    method of the view: the state store sits below the summaries and knows none of them."""
    if view.summaries is not None and probe in view.summaries:
        return view.summaries[probe]
    return view.once(("summary", probe, id(config)), lambda: fold(probe, view, config))


def fold(probe: str, view: StateView, config: Any) -> Any:
    """A fresh summary of `probe` folded over the view's whole history."""
    if config is None:
        config = Config()
    cls = registry().get(probe)
    if cls is None:
        raise LookupError(f"no summary of probe {probe!r} (watchdog/plugins_list.py lists the summary "
                          "modules: SUMMARY_MODULES)")
    summary = cls(config)
    for sample in view.history(probe):
        summary.add(sample, view)
    return summary


class Summaries:
    """The daemon's summaries, brought up to date with each view before a detector pass.

    `probes` limits them to some probes (a discovered job's summaries cover only the probes its
    view filters; see watchdog.detectors.jobs). A history may be a filtered view of the store's
    (it has an `origin`, the store's tuple): new samples are found by identity in the origin, so a
    filtered sample is made only for the samples new since the last pass."""

    def __init__(self, probes: Optional[Tuple[str, ...]] = None) -> None:
        self._probes = probes
        self._config: Any = None
        self._by_probe: Dict[str, Any] = {}
        self._last: Dict[str, Sample] = {}
        #: Samples folded so far (all probes): what a pass costs beyond O(1) questions.
        self.folded = 0

    def attach(self, view: StateView, config: Any) -> StateView:
        """Fold the samples new since the last call and return the view carrying the summaries."""
        return replace(view, summaries=self.update(view, config))

    def update(self, view: StateView, config: Any) -> Dict[str, Any]:
        """Fold the samples new since the last call; the summaries by probe. A config change
        reconfigures them; a history that lost the last folded sample rebuilds from the view."""
        if config is not self._config:
            self._config = config
            for summary in self._by_probe.values():
                summary.reconfigure(config)
        for probe, cls in registry().items():
            if self._probes is not None and probe not in self._probes:
                continue
            hist = view.history(probe)
            origin = getattr(hist, "origin", hist)
            last = self._last.get(probe)
            start, fresh = _new_from(origin, last)
            summary = self._by_probe.get(probe)
            if summary is None or fresh:
                if summary is not None and last is not None:
                    log.warning("summary of %s restarted: samples were dropped before it read them", probe)
                summary = self._by_probe[probe] = cls(config)
            for j in range(start, len(hist)):
                summary.add(hist[j], view)
            self.folded += len(hist) - start
            if start < len(origin):
                self._last[probe] = origin[len(origin) - 1]
        return dict(self._by_probe)


def _new_from(hist: Sequence[Sample], last: Optional[Sample]) -> Tuple[int, bool]:
    """Index of the first sample after `last` (walking back from the newest), and whether `last`
    was not found so everything must be folded afresh."""
    if last is None:
        return 0, True
    i = len(hist) - 1
    while i >= 0 and hist[i] is not last:
        i -= 1
    if i < 0:
        return 0, True
    return i + 1, False

"""Detector registry: pure functions `detect(view, config) -> list[Finding]`.

Detectors never do I/O and never keep state of their own: everything they need is in the
StateView (latest observations, per-probe history and its incremental summaries, probe health, the
daemon's start time), so they are tested on synthetic views and give the same answer for the same
input. The runner below keeps the summaries (watchdog.summaries) up to date, so a pass reads each
new sample once instead of the whole history.
"""

from __future__ import annotations

import logging
from typing import AbstractSet, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple, Union

from dataclasses import replace

from watchdog.config.schema import Config
from watchdog.core.findings import Finding
from watchdog.core.plugins import Slot
from watchdog.core.rulecatalog import catalog
from watchdog.core.state import StateView
from watchdog.core.verdict import is_interruption, verdict_of
from watchdog.summaries import Summaries
from watchdog.detectors.jobs import JobSummaries, jobs_of
from watchdog.detectors.series import blind_reason

log = logging.getLogger(__name__)

Detector = Callable[[StateView, Config], List[Finding]]

class DetectorPlugin(NamedTuple):
    """What a detector module declares: its `detect(view, config)` and its `TRIGGERS` (the probes
    whose rounds it reads; empty: run after every round)."""

    module: str
    detect: Detector
    triggers: Tuple[str, ...]


#: The detector modules, handed down by the composition root (`watchdog.plugins_list`).
DETECTORS: Slot[Tuple[DetectorPlugin, ...]] = Slot("the detectors")


def install(plugins: Sequence[DetectorPlugin]) -> None:
    DETECTORS.fill(tuple(plugins))


def detector_modules() -> Tuple[str, ...]:
    """The detector modules, in the composition root's order."""
    return tuple(p.module for p in DETECTORS.get())


def load_detectors() -> List[Tuple[str, Detector]]:
    return [(p.module.rsplit(".", 1)[1], p.detect) for p in DETECTORS.get()]


def triggers() -> Dict[str, Tuple[str, ...]]:
    """Detector name -> the probes whose new observation can change its answer, as each module
    declares them (`TRIGGERS`; empty: run after every round)."""
    return {p.module.rsplit(".", 1)[1]: p.triggers for p in DETECTORS.get() if p.triggers}


def with_verdict(f: Finding) -> Finding:
    """The finding with its verdict (watchdog.core.verdict): the `domain` label and, in the
    details, the domain, whether a restart helps and what decided. Info findings carry none."""
    if f.severity == "info" or "domain" in f.labels:
        return f
    v = verdict_of(f.rule, f.labels, f.details)
    details = {**f.details, "interruption": v.to_dict()}
    if not is_interruption(f.rule):
        return replace(f, details=details)
    # An interruption's verdict is also a label: channels and the fleet can group and count by it.
    return replace(f, labels={**f.labels, "domain": v.domain, "restart": v.restart}, details=details)


def blind_rules(view: StateView) -> FrozenSet[str]:
    """The rules whose alerts the engine holds now (`Rule.observes`): a probe they read is running
    but cannot see. A probe that is not running at all (disabled by a reload) holds nothing: its
    alerts resolve as absent ones do."""
    blind = {name for name in {p for r in catalog().values() for p in r.observes}
             if view.status(name) is not None and blind_reason(view, name)}
    return frozenset(r.name for r in catalog().values() if blind.intersection(r.observes))


def run_detectors(detectors: List[Tuple[str, Detector]], view: StateView, config: Config) -> Tuple[List[Finding], List[str]]:
    """Run every detector; one that raises is reported (as an error string), never fatal."""
    findings: List[Finding] = []
    errors: List[str] = []
    for name, fn in detectors:
        try:
            findings.extend(with_verdict(f) for f in fn(view, config))
        except Exception as exc:  # a detector bug must not blind the others
            log.exception("detector %s failed", name)
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    return findings, errors


#: Probes whose new observation can change a detector's answer (declared per module, see
#: `triggers`). After a round of one probe only the detectors it feeds run again; the others' last
#: answer is reused until the next full pass (the daemon runs one every few seconds, so time-based
#: conditions stay current). Without this, the 3 s log rounds would re-run the NPU trend and stall
#: detectors over an hour of history many times per NPU observation.


class IncrementalDetectors:
    """The daemon's detector passes: full (trigger None) or after rounds of some probes (a probe
    name, or a set of names: a batch of rounds that finished together)."""

    def __init__(self, detectors: List[Tuple[str, Detector]]):
        self.detectors = detectors
        self._triggers = triggers()
        self._last: Dict[str, List[Finding]] = {}
        #: View time of each detector's last run.
        self._ran_at: Dict[str, float] = {}
        self.summaries = Summaries()
        #: Per discovered job (watchdog.detectors.jobs): fed like the node's, job by job.
        self.jobs = JobSummaries()

    def prepare(self, view: StateView, config: Config) -> StateView:
        """The view with the runner's summaries brought up to date (folds only new samples); the
        discovered jobs' summaries are brought up to date by their own passes."""
        self.jobs.keep(jobs_of(view))
        return replace(self.summaries.attach(view, config), job_summaries=self.jobs)

    def run(self, view: StateView, config: Config, trigger: Optional[Union[str, AbstractSet[str]]] = None,
            fresh_within: float = 0.0) -> Tuple[List[Finding], List[str]]:
        """Run the detectors `trigger`'s rounds feed (all of them when it is None) and, with
        `fresh_within`, every other detector whose answer is older than that: a pass that builds
        a view brings every answer up to date, so the periodic tick may be skipped while every
        answer is recent (see `all_fresh`, docs/architecture.md "When detectors run")."""
        if view.summaries is None:
            view = self.prepare(view, config)
        findings: List[Finding] = []
        errors: List[str] = []
        for name, fn in self.detectors:
            if self._due(name, view.now, trigger, fresh_within):
                got, err = run_detectors([(name, fn)], view, config)
                self._last[name] = got
                self._ran_at[name] = view.now
                errors.extend(err)
            findings.extend(self._last[name])
        return findings, errors

    def _due(self, name: str, now: float, trigger: Optional[Union[str, AbstractSet[str]]], fresh_within: float) -> bool:
        if name not in self._last or (fresh_within > 0 and not self._fresh(name, now, fresh_within)):
            return True  # never run, or stale: a pass that builds a view brings it up to date
        deps = self._triggers.get(name)
        if deps is None:
            return True  # no trigger list: every pass
        if trigger is None:
            return fresh_within <= 0  # a full pass runs all; a periodic one only the stale
        return trigger in deps if isinstance(trigger, str) else not trigger.isdisjoint(deps)

    def _fresh(self, name: str, now: float, fresh_within: float) -> bool:
        return fresh_within > 0 and 0 <= now - self._ran_at.get(name, -1e18) < fresh_within

    def reconfigured(self) -> None:
        """After a reload every answer is stale (it may rest on a setting that changed or on a
        probe now gone): the next pass, at the latest the next tick, runs every detector."""
        self._ran_at.clear()

    def all_fresh(self, now: float, fresh_within: float) -> bool:
        """Every detector ran within `fresh_within` of `now` (checked before building a view:
        the daemon skips a periodic pass while every answer is this recent and none found
        anything)."""
        return all(name in self._last and self._fresh(name, now, fresh_within) for name, _ in self.detectors)

    def last_findings(self) -> List[Finding]:
        """The answers of the last pass, as a pass that ran no detector would report them."""
        return [f for name, _ in self.detectors for f in self._last.get(name, ())]

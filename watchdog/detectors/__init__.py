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

#: A detector is judged again by every round of the probes that feed it, so between two of their
#: rounds only time can change its answer (a heartbeat ages, a hold runs out). A periodic pass
#: therefore re-runs it only when those rounds are late: when its last run is older than its
#: inputs' cadence (the shortest interval of its trigger probes that run on their interval, at
#: most CADENCE_CAP; a detector with no trigger list runs after every round of any probe and
#: counts CADENCE_CAP) plus
#: CADENCE_MARGIN, or than the pass's own `fresh_within` if that is longer. At the shipped 10 s
#: rounds the periodic pass then spares the liveness, NPU, stall and kernel detectors that the
#: rounds keep judging (two thirds of an idle daemon's detector CPU went to re-running them every
#: 5 s on unchanged input), and every answer is still at most about 11 s old when nothing is late
#: (docs/architecture.md, "When detectors run").
CADENCE_CAP = 10.0
CADENCE_MARGIN = 1.0


class IncrementalDetectors:
    """The daemon's detector passes: full (trigger None) or after rounds of some probes (a probe
    name, or a set of names: a batch of rounds that finished together)."""

    def __init__(self, detectors: List[Tuple[str, Detector]]):
        self.detectors = detectors
        self._triggers = triggers()
        self._last: Dict[str, List[Finding]] = {}
        #: View time of each detector's last run.
        self._ran_at: Dict[str, float] = {}
        #: How old each detector's answer may get before a periodic pass runs it (`cadence`).
        self._cadence: Dict[str, float] = {}
        self.summaries = Summaries()
        #: Per discovered job (watchdog.detectors.jobs): fed like the node's, job by job.
        self.jobs = JobSummaries()

    def prepare(self, view: StateView, config: Config) -> StateView:
        """The view with the runner's summaries brought up to date (folds only new samples); the
        discovered jobs' summaries are brought up to date by their own passes."""
        self.jobs.keep(jobs_of(view))
        return replace(self.summaries.attach(view, config), job_summaries=self.jobs)

    def run(self, view: StateView, config: Config, trigger: Optional[Union[str, AbstractSet[str]]] = None,
            fresh_within: float = 0.0, next_check: Optional[float] = None) -> Tuple[List[Finding], List[str]]:
        """`fresh_within` (periodic passes): a detector that ran this recently, or within its
        inputs' cadence (`cadence`), keeps its answer instead of running again. `next_check` (a
        probe round's pass: when the next periodic pass is due): a detector that pass would run
        (it would not be fresh then) runs now, while the view is at hand, so that pass finds
        everything fresh and can be skipped (see `all_fresh`); it keeps the periodic passes'
        promise, every answer within its window at each of them."""
        if view.summaries is None:
            view = self.prepare(view, config)
        findings: List[Finding] = []
        errors: List[str] = []
        for name, fn in self.detectors:
            if self._due(name, view.now, trigger, fresh_within, next_check):
                got, err = run_detectors([(name, fn)], view, config)
                self._last[name] = got
                self._ran_at[name] = view.now
                self._cadence[name] = self.cadence(name, view)
                errors.extend(err)
            findings.extend(self._last[name])
        return findings, errors

    def _due(self, name: str, now: float, trigger: Optional[Union[str, AbstractSet[str]]], fresh_within: float,
             next_check: Optional[float] = None) -> bool:
        if name not in self._last:
            return True
        deps = self._triggers.get(name)
        if trigger is not None:
            fed = deps is not None and (trigger in deps if isinstance(trigger, str) else not trigger.isdisjoint(deps))
            return deps is None or fed or (
                next_check is not None and not self._fresh(name, next_check, fresh_within))
        return not self._fresh(name, now, fresh_within)

    def cadence(self, name: str, view: StateView) -> float:
        """How often the rounds of `name`'s trigger probes judge it again, plus CADENCE_MARGIN;
        0 (a periodic pass's own `fresh_within` applies) when none of them is a registered probe
        that runs its rounds on its interval: the rounds of one that follows changes (the logs
        and kernel probes) are mostly quiet and judge nothing, so a hold running out among its
        answers is seen by the periodic passes, within `fresh_within` as before (a log finding
        held past its time was released as a page when the stall that inhibited it resolved)."""
        deps = self._triggers.get(name)
        if deps is None:
            return CADENCE_CAP + CADENCE_MARGIN
        intervals = [st.interval for st in map(view.status, deps)
                     if st is not None and st.interval > 0 and not st.follows_changes]
        return min(min(intervals), CADENCE_CAP) + CADENCE_MARGIN if intervals else 0.0

    def _fresh(self, name: str, now: float, fresh_within: float) -> bool:
        window = max(fresh_within, self._cadence.get(name, 0.0))
        return fresh_within > 0 and 0 <= now - self._ran_at.get(name, -1e18) < window

    def reconfigured(self) -> None:
        """After a reload every answer is stale: it may rest on settings that changed or on a
        probe now gone, which no round of the remaining probes would judge again before their
        cadence ran out (seconds late); the next pass, at the latest the next tick, runs all."""
        self._ran_at.clear()

    def all_fresh(self, now: float, fresh_within: float) -> bool:
        """Every detector ran within `fresh_within` of `now`: a periodic pass would run none of
        those with trigger lists, so the daemon may skip it (checked before building a view)."""
        return all(name in self._last and self._fresh(name, now, fresh_within) for name, _ in self.detectors)

    def last_findings(self) -> List[Finding]:
        """The answers of the last pass, as a pass that ran no detector would report them."""
        return [f for name, _ in self.detectors for f in self._last.get(name, ())]

"""Muting: silences and inhibitions, as data. Which firing alerts must not be sent, and why.

Silences arrive as data (`ActiveSilences`: `watchdog.alerting.silences.Muter` reads them from the
store, where `npu-watchdog silence add` writes them, possibly from another process); inhibitions from the config (defaults: the rule catalog's declarations). A source rule
inhibits a target while an alert of the source fires with the same values for the rule's `equal`
labels. When two rules inhibit each other (the same event seen by two probes, e.g. `loss_nan` and
`log_nan`), only the one that was sent first (or, failing that, fired first) mutes the other, so
the event pages exactly once and never zero times. An end (a job or rank gone) that a paged cause
mutes stays muted as `explained:<rule>` after the cause clears.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Optional, Sequence, Tuple

from watchdog.alerting.decide.records import AlertRow, Silence
from watchdog.alerting.decide.routing import match_labels, matches_all
from watchdog.config.sections.alerting import InhibitRule, LabelMatcher

log = logging.getLogger("watchdog.alerts")

Key = Tuple[Tuple[str, str], ...]
#: The mute reason of an end its paged cause explains for good ("explained:<cause rule>"): kept
#: after the cause clears, so the end is never paged on its own (see EngineCore._fold).
EXPLAINED = "explained:"
#: The mute reason of a symptom a firing cause holds back ("inhibited:<cause rule>").
INHIBITED = "inhibited:"


def release_due(a: AlertRow, now: float, hold: Callable[[AlertRow], float]) -> Optional[float]:
    """When an unsent alert that its cause held back, and that outlives the cause, may page: `hold`
    after the cause cleared (`AlertRow.released_at`, set here at the first look). None for an
    alert not released from inhibition (a silence ending releases at once)."""
    if a.released_at is None:
        if not (a.muted or "").startswith(INHIBITED):
            return None
        a.released_at = now
    return a.released_at + max(0.0, hold(a))


def explained(a: AlertRow) -> bool:
    """Whether `a` is an end folded into its cause's page for good."""
    return (a.muted or "").startswith(EXPLAINED)


#: Precedence of a firing alert among same-event peers: sent first, then fired first, then name.
Rank = Tuple[int, float, str]


def _rank(a: AlertRow) -> Rank:
    return (0 if a.notified else 1, a.firing_since or 0.0, a.rule)


def _key(labels: Dict[str, str], equal: Sequence[str]) -> Key:
    return tuple((k, labels.get(k, "")) for k in equal)


@dataclass
class FiringIndex:
    """The firing alerts by (rule, equal-label values), keeping the highest-precedence one."""

    best: Dict[Tuple[str, Key], Tuple[Rank, str]]

    @classmethod
    def build(cls, alerts: Iterable[AlertRow], rules: Sequence[InhibitRule]) -> "FiringIndex":
        equals = {tuple(r.equal) for r in rules}
        best: Dict[Tuple[str, Key], Tuple[Rank, str]] = {}
        for a in alerts:
            if a.state != "firing":
                continue
            # Under the labels it paged with and its present ones: a card still broken under a
            # new holder explains the new job's symptoms and the old job's end alike.
            for eq in equals:
                for k in {(a.rule, _key(labels, eq)) for labels in (a.labels, a.now_labels)}:
                    if k not in best or _rank(a) < best[k][0]:
                        best[k] = (_rank(a), a.fp)
        return cls(best)


@dataclass(frozen=True)
class ActiveSilences:
    """The silences in force at a pass (with their parsed matchers) and when that set changes
    next by time alone: what the engine's pure core needs of them, read by `Muter`."""

    active: Tuple[Tuple[Silence, Tuple[LabelMatcher, ...]], ...] = ()
    next_change: float = float("inf")


def mute_reason(a: AlertRow, silences: ActiveSilences, index: FiringIndex,
                rules: Sequence[InhibitRule]) -> Optional[str]:
    """"silenced:<id>", "inhibited:<rule>" or None (send it)."""
    labels = match_labels(a.now_labels, a.rule, a.severity)
    for s, ms in silences.active:
        if matches_all(ms, labels):
            return f"silenced:{s.id}"
    return inhibitor(a, index, rules)


def mutual(rules: Sequence[InhibitRule], src: str, dst: str) -> bool:
    """Whether `src` and `dst` inhibit each other (one event seen by two probes)."""
    return any(dst in r.source and src in r.target for r in rules)


def source_alert(a: AlertRow, src: str, index: FiringIndex, rules: Sequence[InhibitRule]) -> Optional[str]:
    """The fingerprint of the `src` alert that mutes `a` (its highest-precedence one)."""
    for rule in rules:
        if a.rule in rule.target and src in rule.source:
            got = index.best.get((src, _key(a.labels, rule.equal)))
            if got is not None:
                return got[1]
    return None


def inhibitor(a: AlertRow, index: FiringIndex, rules: Sequence[InhibitRule]) -> Optional[str]:
    """"inhibited:<source rule>" when a firing source mutes `a`, else None."""
    for rule in rules:
        if a.rule not in rule.target:
            continue
        key = _key(a.labels, rule.equal)
        for src in rule.source:
            if src == a.rule:
                continue
            got = index.best.get((src, key))
            if got is None:
                continue
            if mutual(rules, src, a.rule):
                # Same event: the rule that paged (or fired) first carries it; its own alerts are
                # never muted by the peer rule, whatever order their ranks came in.
                mine = index.best.get((a.rule, key))
                if mine is not None and not got[0] < mine[0]:
                    continue
            return INHIBITED + src
    return None

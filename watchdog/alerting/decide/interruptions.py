"""Interruptions paged, counted by the alert engine when it decides that an alert fires.

Why the engine counts: `npu_watchdog_interruptions_total{domain,cause}` is a fact about what the
engine decided (an alert carrying a verdict went from pending to firing), so it is counted in
the pass that decides it, rolled back with that pass if its commit fails, and committed with the
alert rows in the same transaction (the counts survive a daemon restart with the alert state).
The metrics module only reads the totals. One firing episode counts once: an alert that comes
back before its incident resolved, or escalates, keeps its episode (`lifecycle` does not fire
it again); an alert restored from disk was counted when it fired. The keys are bounded (the
verdict's domains times the rules and clean-end rows that decide a cause).
"""

from __future__ import annotations

from typing import Dict, Iterable, Tuple

from watchdog.alerting.decide.records import AlertRow

#: (domain, cause) -> interruptions paged.
Counts = Dict[Tuple[str, str], int]


def interruption_of(a: AlertRow) -> Tuple[str, str]:
    """The (domain, cause) an alert counts under, or ("", "") when it carries no verdict: the
    domain label the verdict set on the finding, the cause its details name (else the rule)."""
    domain = (a.labels or {}).get("domain") or ""
    if not domain:
        return "", ""
    verdict = ((a.finding or {}).get("details") or {}).get("interruption") or {}
    return str(domain), str(verdict.get("cause") or a.rule)


def count_fired(counts: Counts, fired: Iterable[AlertRow]) -> Counts:
    """Add the alerts that just fired to `counts` (in place); returns what this pass added."""
    added: Counts = {}
    for a in fired:
        key = interruption_of(a)
        if not key[0] or a.firing_since is None:
            continue
        counts[key] = counts.get(key, 0) + 1
        added[key] = added.get(key, 0) + 1
    return added

"""The alert state machine: pure, no I/O, no clock of its own (the caller passes `now`).

Each finding fingerprint (`Finding.key`) moves through:

    (absent) -> pending --[held for its `for`]--> firing --[absent for resolve_delay]--> resolved

A resolved alert that was sent waits in `resolved` for the rest of its incident (the alerts sent
in the same firing message): the incident resolves in one message when its last alert has
(see `incident_resolutions`); a finding that comes back meanwhile returns to firing, unpaged.

The restart rule: an alert restored from disk carries `held_until` (the start time plus the
warm-up its detector needs to see fresh evidence, see `Rule.warmup`). Until then its absence
means "not seen yet", not "gone": it is neither resolved nor deleted, and, being already
notified, it is not paged again when its detector reports it anew. After the hold, absence is
counted from the end of the hold. A daemon restart therefore never sends a false RESOLVED.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Dict, List, Mapping, Optional, Set

from watchdog.alerting.decide.records import AlertRow
from watchdog.core.findings import SEVERITY_RANK, Finding, identity

log = logging.getLogger("watchdog.alerts")


@dataclass
class Transitions:
    """What one evaluation changed."""

    #: Alerts that moved pending -> firing in this pass.
    fired: List[AlertRow] = field(default_factory=list)
    #: Alerts whose incident resolved in this pass (a resolved message is due).
    resolved: List[AlertRow] = field(default_factory=list)
    #: Fingerprints whose row must be deleted from the store.
    deleted: List[str] = field(default_factory=list)
    #: Fingerprints whose row changed (saved at the end of the pass).
    changed: Set[str] = field(default_factory=set)


#: How long restored alerts wait for the first complete round of every probe before their warm-up
#: starts anyway (a probe that never completes must not hold them forever).
FIRST_ROUND_GRACE = 600.0


def restore(alerts: Mapping[str, AlertRow], started: float, warmup: Callable[[AlertRow], float]) -> None:
    """Mark alerts loaded from disk as held until their detector has warmed up again. The warm-up
    counts from the first complete round of every probe (`warmed_up`), since a loaded machine may
    take a while to produce fresh evidence; until then it counts from the grace's end."""
    for a in alerts.values():
        # The daemon being down is not the finding clearing: absence counts from this start.
        a.last_seen = max(a.last_seen, started)
        a.warmup = max(0.0, warmup(a))
        a.held_until = started + FIRST_ROUND_GRACE + a.warmup


def first_round_done(alerts: Mapping[str, AlertRow], now: float) -> None:
    """Every probe has delivered fresh evidence once: each held alert's warm-up starts now."""
    for a in alerts.values():
        if a.held_until is not None:
            a.held_until = min(a.held_until, now + a.warmup)


def observe(alerts: Dict[str, AlertRow], present: Mapping[str, Finding], now: float, tr: Transitions) -> None:
    """Create rows for new findings and refresh the rows of findings seen again."""
    for fp, f in present.items():
        a = alerts.get(fp) or _adopt(alerts, fp, f, tr)
        if a is None:
            alerts[fp] = AlertRow(fp, f.rule, f.severity, dict(f.labels), f.to_dict(), "pending", now, None, now)
            log.info("finding %s pending (%s): %s", f.rule, f.severity, f.summary,
                     extra={"finding": f.to_dict(), "event": "finding_new"})
        else:
            a.last_seen = now
            if a.state == "resolved":
                a.state = "firing"  # back before its incident resolved: still the same page
            if a.state == "firing" and a.notified and SEVERITY_RANK[f.severity] > SEVERITY_RANK.get(a.severity, 0):
                log.warning("alert %s escalated %s -> %s: %s", f.rule, a.severity, f.severity, f.summary,
                            extra={"finding": f.to_dict(), "event": "finding_changed"})
                a.notified = False  # an escalation pages again
            a.severity = f.severity
            a.finding = f.to_dict()
        tr.changed.add(fp)


def _adopt(alerts: Dict[str, AlertRow], fp: str, f: Finding, tr: Transitions) -> Optional[AlertRow]:
    """The row a version before `Finding.context` kept for this finding under its key over every
    label (whatever the context was then: the holder may have changed across the upgrade), moved
    to the finding's key: an upgrade must neither resolve nor re-page a firing card fault."""
    if not f.context:
        return None
    ident = f.identity
    old = next((k for k, a in alerts.items() if k != fp and a.rule == f.rule
                and identity(a.labels, f.context) == ident), None)
    if old is None:
        return None
    a = alerts.pop(old)
    a.fp = fp
    alerts[fp] = a
    tr.deleted.append(old)
    return a


def absent_for(a: AlertRow, here: bool, now: float) -> Optional[float]:
    """How long the finding has really been absent; None while present or held after a restart."""
    held = a.held_until or 0.0
    if here or now < held:
        return None
    return now - max(a.last_seen, held)


def advance(alerts: Dict[str, AlertRow], present: Mapping[str, Finding], now: float,
            for_rule: Callable[[str], float], resolve_delay: float, tr: Transitions,
            blind: AbstractSet[str] = frozenset()) -> None:
    """Move every alert along the state machine. A firing alert of a `blind` rule (its probe
    cannot see) is not absent: it stays firing, and its absence counts from when it sees again."""
    for fp, a in list(alerts.items()):
        here = fp in present
        if a.state == "firing" and a.rule in blind:
            a.last_seen = max(a.last_seen, now)
        absent = absent_for(a, here, now)
        gone = absent is not None and absent >= resolve_delay
        if a.state == "pending":
            if gone:
                del alerts[fp]
                tr.deleted.append(fp)
            elif here and now - a.pending_since >= for_rule(a.rule):
                a.state, a.firing_since = "firing", now
                log.warning("alert %s firing (%s): %s", a.rule, a.severity, a.finding.get("summary", ""),
                            extra={"finding": a.finding, "event": "alert_firing"})
                tr.fired.append(a)
                tr.changed.add(fp)
        elif a.state == "firing" and gone:
            log.info("alert %s resolved after %.0fs absent: %s", a.rule, now - a.last_seen,
                     a.finding.get("summary", ""), extra={"finding": a.finding, "event": "finding_resolved"})
            if a.notified:
                a.state = "resolved"
                tr.changed.add(fp)
            else:
                del alerts[fp]
                tr.deleted.append(fp)
        if a.held_until is not None and now >= a.held_until:
            a.held_until = None  # warmed up: from now on the normal rules apply


def next_transition(alerts: Mapping[str, AlertRow], present: Mapping[str, Finding],
                    for_rule: Callable[[str], float], resolve_delay: float) -> float:
    """The earliest time `advance` would change an alert without new findings (infinity when
    none): a present pending alert's `for` ending, an absent alert's resolve delay ending, a
    restart hold ending. The engine's timer sleeps until then instead of polling."""
    times = []
    for fp, a in alerts.items():
        held = a.held_until
        if held is not None:
            times.append(held)
        here = fp in present
        if a.state == "pending" and here:
            times.append(a.pending_since + for_rule(a.rule))
        elif a.state in ("pending", "firing") and not here:
            times.append(max(a.last_seen, held or 0.0) + resolve_delay)
    return min(times, default=float("inf"))


def incident_resolutions(alerts: Dict[str, AlertRow], tr: Transitions) -> List[List[AlertRow]]:
    """Incidents whose every alert has resolved: each is one resolved message (the rows are
    removed). Alerts sent without an incident (older state files) resolve on their own."""
    firing = {a.incident for a in alerts.values() if a.state == "firing" and a.incident}
    done: Dict[str, List[AlertRow]] = {}
    for a in alerts.values():
        if a.state == "resolved" and (a.incident is None or a.incident not in firing):
            done.setdefault(a.incident or a.fp, []).append(a)
    for batch in done.values():
        for a in batch:
            del alerts[a.fp]
            tr.deleted.append(a.fp)
            tr.resolved.append(a)
    return list(done.values())


def step(alerts: Dict[str, AlertRow], present: Mapping[str, Finding], now: float,
         for_rule: Callable[[str], float], resolve_delay: float) -> Transitions:
    """One evaluation: record what is present, then advance every alert."""
    tr = Transitions()
    observe(alerts, present, now, tr)
    advance(alerts, present, now, for_rule, resolve_delay, tr)
    incident_resolutions(alerts, tr)
    return tr

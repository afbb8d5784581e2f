"""The alert engine's pure core: findings and a time in, typed notifications out.

Why a core apart from the engine: the decisions (what is pending, firing, muted, grouped, due,
resolved, and which channel gets what) are the product, and they are easiest to get right where
nothing else happens: no thread, no clock (every call takes `now`), no database, no network. The
shell (watchdog.alerting.engine.AlertEngine) owns the timer thread, reads the silences, commits a
pass's `PassResult` to SQLite and wakes the senders; tests drive the core directly.

A pass has two halves because of one cost the shell keeps low: `advance` runs the state machine,
then (only when an alert fires, or on a timer pass) the shell reads the silences, then `settle`
mutes, groups, flushes, reminds, resolves incidents and routes. The one outside call a pass makes
is the snapshot request (`SnapshotRequester.request`: it only decides and returns the archive's
path; the capture runs elsewhere), since a message names the snapshot of what it pages about.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import AbstractSet, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from watchdog.compat import Protocol  # 3.7: from typing_extensions

from watchdog.alerting.decide import lifecycle
from watchdog.alerting.decide.grouping import Groups, group_key
from watchdog.alerting.decide.interruptions import Counts, count_fired
from watchdog.alerting.decide.muting import (EXPLAINED, INHIBITED, ActiveSilences, FiringIndex, explained, mutual, mute_reason,
                                             release_due, source_alert)
from watchdog.alerting.decide.notification import Notification, OutboxItem, notification
from watchdog.alerting.decide.records import AlertRow
from watchdog.alerting.decide.routing import RouteTarget, route
from watchdog.alerting.decide.storagefault import Carry, SavePoint, apply_carry
from watchdog.config.sections.alerting import AlertingConfig
from watchdog.core.findings import SEVERITY_RANK, Finding
from watchdog.core.rulecatalog import is_end

log = logging.getLogger("watchdog.alerts")

#: Why each firing alert is muted now (None: not muted), by fingerprint.
Mute = Dict[str, Optional[str]]


class SnapshotRequester(Protocol):
    """Asks for the evidence bundle of a finding about to be paged; returns the archive's path, or
    None when none is taken (watchdog.snapshots' taker is one)."""

    def request(self, finding: Finding) -> Optional[str]: ...


@dataclass(frozen=True)
class PassResult:
    """What one pass decided: the notifications, their outbox rows (one per channel that takes
    them), the alert rows to save and delete, and when a pass without new findings could change
    something next (the shell's timer sleeps until then)."""

    notifications: Tuple[Notification, ...]
    items: Tuple[OutboxItem, ...]
    changed: Tuple[AlertRow, ...]
    deleted: Tuple[str, ...]
    due_at: float
    #: The interruptions this pass counted ((domain, cause) -> how many), committed with it.
    interruptions: Tuple[Tuple[Tuple[str, str], int], ...] = ()


def _no_hold(_a: AlertRow) -> float:
    return 0.0


class EngineCore:
    """The alerts by fingerprint, the open group windows and the channels' re-push times; the
    findings of the last detector pass (`present`)."""

    def __init__(self, config: AlertingConfig, alerts: Dict[str, AlertRow],
                 interruptions: Optional[Counts] = None, release_hold: Callable[[AlertRow], float] = _no_hold):
        self.config = config
        self.alerts = alerts
        #: How long a symptom whose cause cleared waits before it may page on its own (the shell
        #: passes `rulecatalog.release_hold`: two rounds of its probes; see `_schedule`).
        self.release_hold = release_hold
        #: Interruptions paged, by (domain, cause): counted when an alert carrying a verdict fires.
        self.interruptions: Counts = dict(interruptions or {})
        self.groups = Groups()
        self.present: Dict[str, Finding] = {}
        self.blind: FrozenSet[str] = frozenset()
        #: Channel that wants firing alerts pushed again (`repush_every`) -> when they last were.
        self.repushed: Dict[str, float] = {}
        #: What rolled-back passes learnt about the alerts they created (see storagefault); one
        #: dict for the core's life (the shell's log filter holds it).
        self.carry: Carry = {}

    # -- a pass -------------------------------------------------------------------------------
    def see(self, findings: Iterable[Finding], blind: AbstractSet[str] = frozenset()) -> None:
        """The findings of a detector pass (replacing the last pass's), and the rules whose
        probes could not look in it (their absent findings are not gone)."""
        self.present = {f.key: f for f in findings}
        self.blind = frozenset(blind)

    def advance(self, now: float, observe: bool) -> lifecycle.Transitions:
        """The state machine's half of a pass: with `observe`, record the present findings first."""
        cfg = self.config
        tr = lifecycle.Transitions()
        if observe:
            lifecycle.observe(self.alerts, self.present, now, tr)
            if self.carry:
                apply_carry(self.alerts, self.carry, self.present)
        lifecycle.advance(self.alerts, self.present, now, cfg.for_rule, cfg.resolve_delay, tr, self.blind)
        return tr

    def firing(self) -> bool:
        """Whether an alert fires (only then do silences mute anything)."""
        return any(a.state == "firing" for a in self.alerts.values())

    def settle(self, now: float, tr: lifecycle.Transitions, silences: ActiveSilences,
               channels: Sequence[RouteTarget], snapshots: Optional[SnapshotRequester] = None) -> PassResult:
        """The rest of the pass `advance` began: mute, group, flush, remind, resolve, refresh, route."""
        cfg = self.config
        counted = count_fired(self.interruptions, tr.fired)
        mute = self._mute(tr, silences, snapshots)
        self._schedule(mute, now, tr.changed)
        notes = self._flush(mute, now, tr.changed, snapshots)
        notes += self._reminders(mute, now, tr.changed)
        for batch in lifecycle.incident_resolutions(self.alerts, tr):
            # Alerts folded into the page without being shown (same event) are not listed either;
            # an end its cause explained was never shown: it goes without a message.
            shown = [a for a in batch if not explained(a)]
            if shown:
                notes.append(notification("resolved", [a for a in shown if a.last_notified] or shown, now, cfg))
        notes += self._repush(mute, now, channels)
        items = [item for n in notes for item in route(n, channels, cfg.sends_direct)]
        changed = tuple(self.alerts[fp] for fp in tr.changed if fp in self.alerts)
        return PassResult(tuple(notes), tuple(items), changed, tuple(tr.deleted),
                          self._next_due(mute, now, silences, channels), tuple(sorted(counted.items())))

    # -- around a pass ------------------------------------------------------------------------
    def savepoint(self) -> SavePoint:
        return SavePoint.take(self.alerts, self.groups.deadlines, self.repushed, self.interruptions)

    def rollback(self, saved: SavePoint) -> None:
        """Back to `saved` (a commit failed); what the pass learnt of new alerts goes to the carry.
        The interruptions it counted are taken back too: the pass that commits counts them."""
        self.carry.update(saved.restore(self.alerts, self.groups.deadlines, self.repushed))
        self.interruptions.clear()
        self.interruptions.update(saved.interruptions)

    def first_round(self, now: float) -> None:
        """Every probe finished a round: restored alerts start their warm-up now."""
        lifecycle.first_round_done(self.alerts, now)

    def held(self) -> List[str]:
        """The findings whose alerts are not sent yet (`rule: summary`), for `state_unwritable`."""
        return [f"{f.rule}: {f.summary}" for fp, f in sorted(self.present.items())
                if not (fp in self.alerts and self.alerts[fp].notified)]

    # -- the steps of `settle` ----------------------------------------------------------------
    def _next_due(self, mute: Mute, now: float, silences: ActiveSilences, channels: Sequence[RouteTarget]) -> float:
        """The earliest time a pass without new findings could change something: the state
        machine's next transition, an open group's window, a reminder, a channel's re-push,
        a silence starting or ending. Each term mirrors a time test of this pass."""
        cfg = self.config
        times = [lifecycle.next_transition(self.alerts, self.present, cfg.for_rule, cfg.resolve_delay),
                 silences.next_change]
        times += self.groups.deadlines.values()
        if cfg.reminder > 0:
            times += [a.last_notified + cfg.reminder for a in self.alerts.values()
                      if a.state == "firing" and a.notified and not mute.get(a.fp) and a.last_notified is not None]
        times += [self.repushed[ch.name] + every for ch in channels
                  for every in (ch.repush_every,) if every is not None and ch.name in self.repushed]
        return min(times)

    def _mute(self, tr: lifecycle.Transitions, silences: ActiveSilences,
              snapshots: Optional[SnapshotRequester]) -> Mute:
        """Why each firing alert is muted now (None: not muted). Evidence is requested for what just
        fired and is not muted: a symptom that fired in the same pass as its root runs no capture."""
        rules = self.config.inhibitions
        index = FiringIndex.build(self.alerts.values(), rules)
        mute = {a.fp: mute_reason(a, silences, index, rules) for a in self.alerts.values() if a.state == "firing"}
        for a in self.alerts.values():
            if a.state == "firing" and a.notified and explained(a):
                mute[a.fp] = a.muted  # for good, also after its cause cleared (not once escalated)
        for a in tr.fired:
            if mute.get(a.fp) is None:
                self._request_snapshot(a, snapshots)
        for a in self.alerts.values():
            if a.state == "firing" and a.notified and a.muted != mute[a.fp]:
                a.muted = mute[a.fp]
                tr.changed.add(a.fp)
        self._fold(mute, index, tr.changed)
        return mute

    def _fold(self, mute: Mute, index: FiringIndex, changed: Set[str]) -> None:
        """An alert muted by a peer that has paged is folded into that page, never paged alone:
        - a same-event peer (one event, two probes) joins the page's incident, which resolves
          only when it has cleared too (not even when the peer resolves first is it paged);
        - an end (`Rule.ends`: the job or a rank gone) whose cause paged at its severity or
          above is explained for good: it stays muted after the cause clears (a card back after
          the job it killed was replaced must not page that old job's end), joins no incident
          (the cause's resolved message does not wait for an end that stays) and goes without
          a message when it clears."""
        rules = self.config.inhibitions
        for a in self.alerts.values():
            reason = mute.get(a.fp) or ""
            if a.state != "firing" or a.notified or not reason.startswith(INHIBITED):
                continue
            src = reason.split(":", 1)[1]
            peer = self.alerts.get(source_alert(a, src, index, rules) or "")
            if peer is not None and explained(peer) and mutual(rules, src, a.rule):
                a.notified, a.muted = True, peer.muted  # the same end, explained by the same page
            elif peer is None or not peer.notified or not peer.incident:
                continue
            elif mutual(rules, src, a.rule):
                a.notified, a.incident, a.muted = True, peer.incident, reason
                log.info("alert %s folded into the page of %s (same event)", a.rule, peer.rule,
                         extra={"event": "alert_folded"})
            elif is_end(a.rule) and SEVERITY_RANK.get(peer.severity, 0) >= SEVERITY_RANK.get(a.severity, 0):
                a.notified, a.muted = True, EXPLAINED + peer.rule
                mute[a.fp] = a.muted
                log.info("alert %s explained by the page of %s: not paged on its own", a.rule, peer.rule,
                         extra={"event": "alert_folded"})
            else:
                continue
            changed.add(a.fp)

    def _schedule(self, mute: Mute, now: float, changed: Set[str]) -> None:
        """Open the group of every firing alert not yet sent; record why a muted one waits.
        A released alert goes at once when its silence ended; when its cause cleared, only
        after the release hold (`muting.release_due`): the round that saw the cause go may not yet
        have seen the symptom go with it, and a recovered job must not page its last symptom."""
        for a in self.alerts.values():
            if a.state != "firing" or a.notified:
                continue
            reason = mute.get(a.fp)
            if reason:
                # Muted now: nothing to schedule (a muted alert must not cut the group window
                # short for the others); remember why, for status and metrics.
                if a.muted != reason:
                    log.info("alert %s not sent: %s", a.rule, reason, extra={"event": "alert_muted"})
                    a.muted = reason
                    changed.add(a.fp)
                if reason.startswith(INHIBITED):
                    a.released_at = None  # its cause is back: a new release starts a new hold
                continue
            released = bool(a.muted) and a.fp in self.present  # its silence ended or its cause cleared
            due = release_due(a, now, self.release_hold) if released else None
            self.groups.add(a, now, self.config.group_window, at=now if released and due is None else due)

    def _flush(self, mute: Mute, now: float, changed: Set[str],
               snapshots: Optional[SnapshotRequester]) -> List[Notification]:
        """The first page of every group whose window has closed."""
        notes = []
        for g in self.groups.due(now):
            batch = []
            for a in self.alerts.values():
                if a.state != "firing" or a.notified or group_key(a) != g:
                    continue
                if a.fp not in self.present or mute.get(a.fp):
                    # Muted, or its condition already cleared (e.g. together with the root cause
                    # that held it back): on its way to resolving, nobody needs a page for it now.
                    continue
                due = release_due(a, now, self.release_hold)
                if due is not None and now < due:
                    self.groups.add(a, now, self.config.group_window, at=due)  # its own time comes
                    continue
                if a.muted and not a.snapshot:
                    self._request_snapshot(a, snapshots)  # held back until now: capture before sending
                a.notified, a.last_notified, a.muted, a.released_at = True, now, None, None
                batch.append(a)
                changed.add(a.fp)
            if batch:
                note = notification("firing", batch, now, self.config)
                for a in batch:
                    a.incident = a.incident or note.ikey
                notes.append(note)
        return notes

    def _reminders(self, mute: Mute, now: float, changed: Set[str]) -> List[Notification]:
        every = self.config.reminder
        if every <= 0:
            return []
        due: Dict[str, List[AlertRow]] = {}
        for a in self.alerts.values():
            if a.state == "firing" and a.notified and not mute.get(a.fp) and a.last_notified is not None \
                    and now - a.last_notified >= every:
                a.last_notified = now
                due.setdefault(group_key(a), []).append(a)
                changed.add(a.fp)
        return [notification("reminder", batch, now, self.config) for batch in due.values()]

    def _repush(self, mute: Mute, now: float, channels: Sequence[RouteTarget]) -> List[Notification]:
        """A channel whose receiver forgets a firing alert unless it hears it again (it declares
        `repush_every`) gets every firing alert again that often."""
        notes = []
        for ch in channels:
            every = ch.repush_every
            if every is None:
                continue
            last = self.repushed.setdefault(ch.name, now)
            if now - last >= every:
                self.repushed[ch.name] = now
                live = [a for a in self.alerts.values() if a.state == "firing" and a.last_notified is not None
                        and not mute.get(a.fp)]
                if live:
                    notes.append(notification("refresh", live, now, self.config, only=ch.name))
        return notes

    def _request_snapshot(self, a: AlertRow, snapshots: Optional[SnapshotRequester]) -> None:
        """Ask for the evidence bundle of an alert that will be sent. An inhibited or silenced
        symptom gets none while muted (py-spy on every rank costs), and asks when it is released."""
        f = self.present.get(a.fp)
        if snapshots is not None and f is not None and not a.snapshot:
            try:
                a.snapshot = snapshots.request(f)
                if a.snapshot:
                    log.warning("snapshot of %s: %s", a.rule, a.snapshot, extra={"event": "snapshot_requested"})
            except Exception as exc:
                log.error("snapshot request for %s failed: %s: %s", a.rule, type(exc).__name__, exc)


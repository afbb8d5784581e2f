"""The alert engine: findings in, notifications (committed to the outbox) out.

The engine is the only component with memory of what already fired; detectors stay pure. It wires
four parts kept apart as in Alertmanager:

- `lifecycle`: the pure state machine (pending -> firing -> resolved, `for`, resolve delay, and
  the restart rule: an alert restored from disk is held until its detector has warmed up);
- `muting`: silences and inhibitions (a firing root cause mutes its symptoms);
- `grouping`: the alerts of one host and job that fire together share one message (alerts about
  the watchdog itself get messages of their own);
- `routing`: which channel takes which alerts.

A resolved alert that was notified sends a resolved message, then its state is deleted, so the
next incident pages again. Reminders repeat while firing. Muted alerts that were never sent are
sent at once when their silence ends or their root cause clears (if they still hold).

Everything (alerts, silences, outbox) lives in SQLite in the state directory, so a restart
neither re-pages what was sent nor forgets what is firing. Between detector passes a timer thread
re-evaluates when something can be due by time alone (a group window, a `for`, a resolve delay, a
reminder, an Alertmanager refresh, a silence starting or ending: each pass computes the earliest),
and at least every MAX_SLEEP seconds; it used to poll every second, which cost CPU at idle for
nothing. All work here is local (SQLite), sending happens in the outbox's own threads. The clock
is injected, so tests drive the engine on a fake clock (`timer=False`, then `tick`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set

from watchdog.alerting import lifecycle
from watchdog.alerting.grouping import Groups, group_key
from watchdog.alerting.muting import FiringIndex, Muter, mutual, source_alert
from watchdog.alerting.outbox import DeadMan, Outbox
from watchdog.alerting.render import dashboard_link
from watchdog.alerting.routing import route
from watchdog.alerting.storagefault import (STORAGE_ERRORS, STORAGE_RETRY, Carry, RedoQuiet, SavePoint,
                                            StorageHealth, apply_carry, describe)
from watchdog.alerting.store import AlertRow, AlertStore
from watchdog.config.schema import Config
from watchdog.detectors.selfstate import unwritable_finding
from watchdog.core.findings import SEVERITY_RANK, Finding
from watchdog.core.rulecatalog import JOB_LABELS, warmup

log = logging.getLogger("watchdog.alerts")

GROUP_LABELS = JOB_LABELS
#: The timer's longest sleep without a pass: bounds what a wall-clock jump or an unforeseen
#: deadline could delay, and keeps the hourly silence pruning going on an idle engine.
MAX_SLEEP = 30.0
#: Sleep after a timer pass that left something already due (a restored alert's hold ending: its
#: absence counts from its last sighting only from the next pass): the cadence of the old poll.
RETRY_SLEEP = 1.0
#: While an alert fires, how often the timer checks (one cheap query) whether the `silence` CLI
#: added or removed a silence, so that it takes effect within a second, as it always did.
SILENCE_POLL = 1.0
#: Shortest sleep, so that no clock oddity can make the timer spin.
MIN_SLEEP = 0.01


class AlertEngine:
    def __init__(self, config: Config, runtime: Optional[Any] = None, clock: Callable[[], float] = time.time,
                 timer: bool = True):
        self.config = config
        self.runtime = runtime
        self.clock = clock
        self._lock = threading.RLock()
        self.store = AlertStore(config.paths.state_dir, quarantine_damaged=True)
        self.alerts: Dict[str, AlertRow] = self.store.load_alerts()
        lifecycle.restore(self.alerts, clock(), lambda a: warmup(a.rule, self.config, a.finding))
        if self.alerts:
            log.info("restored %d alert(s) from %s (%d firing), held until their detectors warm up",
                     len(self.alerts), self.store.path, sum(1 for a in self.alerts.values() if a.state == "firing"))
        self.outbox = Outbox(self.store, config.alerting)
        self.outbox.start()
        self.deadman = DeadMan(config.alerting)
        self.muter = Muter(self.store)
        self.groups = Groups()
        self._current: List[Finding] = []
        self._present: Dict[str, Finding] = {}
        self._have_findings = False
        self._am_last: Dict[str, float] = {}
        self._first_round = False
        #: Commits to the state folder: failures, and the episode while it cannot be written.
        self.health = StorageHealth()
        #: What rolled-back passes learnt about the alerts they created (see storagefault).
        self._carry: Carry = {}
        self._quiet = RedoQuiet(self._carry)
        lifecycle.log.addFilter(self._quiet)
        #: On the engine's clock: when the next pass can change something by time alone, when
        #: the last pass ran, and until when the timer sleeps.
        self._due_at = float("inf")
        self._passed_at = clock()
        self._sleeping_until = float("inf")
        #: Set by each pass: an alert fires, so the timer watches for silence changes.
        self._watch_silences = False
        self._polled_at = clock()
        #: Timer passes run (a test counts them).
        self.timer_passes = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._timer: Optional[threading.Thread] = None
        if timer:
            self._timer = threading.Thread(target=self._tick_loop, name="alert-engine", daemon=True)
            self._timer.start()

    # -- the daemon's interface --------------------------------------------------------------
    def process(self, findings: List[Finding], now: Optional[float] = None) -> None:
        with self._lock:
            now = self.clock() if now is None else now
            # Nothing found, nothing was found, no alert, nothing due: the pass would change
            # nothing (the idle daemon's every detector pass), so it is not run.
            idle = not findings and not self._present and not self.alerts and self._have_findings \
                and now < self._due_at
            self._current = list(findings)
            self._present = {f.key: f for f in findings}
            self._have_findings = True
            if idle:
                return
            self._evaluate(now, observe=True)
            if self._due_at < self._sleeping_until:
                self._wake.set()  # something is due before the timer would wake

    def tick(self, now: Optional[float] = None) -> None:
        """A timer pass: group windows, resolve delays, reminders, silence expiry."""
        with self._lock:
            now = self.clock() if now is None else now
            self._passed_at = now
            if self._have_findings:
                # After a rolled-back pass, the findings it had observed are observed again.
                self._evaluate(now, observe=not self.health.writable)
            else:
                self.muter.load_silences(now)

    def current(self) -> List[Finding]:
        """The detectors' findings, and `state_unwritable` while the state folder cannot be written."""
        with self._lock:
            extra = [self._unwritable_finding()] if not self.health.writable else []
            return list(self._current) + extra

    def storage_health(self) -> StorageHealth:
        with self._lock:
            return StorageHealth(self.health.error, self.health.since, self.health.errors_total)

    def check_storage(self) -> None:
        """Re-create a state folder deleted under the daemon before anything needs to write there
        (the main loop calls this at every turn: one `stat`)."""
        with self._lock:
            if self.store.moved():
                self._heal()

    def reconfigure(self, config: Config) -> None:
        with self._lock:
            old = self.config.alerting
            self.config = config
            if old.channels != config.alerting.channels or old.max_age != config.alerting.max_age:
                self.outbox.reconfigure(config.alerting)
            else:
                self.outbox.config = config.alerting
                for ch in self.outbox.channels.values():
                    ch.alerting = config.alerting
            self.deadman.configure(config.alerting)
            self._due_now()  # intervals, delays, channels and inhibitions may have changed

    def round_complete(self) -> None:
        """Every probe finished a round: restored alerts start their warm-up (the first time), and
        the external dead-man checker hears that we are alive."""
        if not self._first_round:
            self._first_round = True
            with self._lock:
                lifecycle.first_round_done(self.alerts, self.clock())
                self._due_now()  # the restored alerts' holds end sooner
        self.deadman.ping()

    def close(self) -> None:
        lifecycle.log.removeFilter(self._quiet)
        self._stop.set()
        self._wake.set()
        if self._timer is not None:
            self._timer.join(2.0)
        self.outbox.stop()
        self.deadman.close()
        with self._lock:
            try:
                self.store.save_alerts(list(self.alerts.values()), [])
            except STORAGE_ERRORS as exc:  # the last committed state stays: what was sent is in it
                log.error("could not save the alert state at shutdown: %s", describe(exc))
            self.store.close()

    # -- read side (metrics, status) ----------------------------------------------------------
    def alert_states(self) -> List[AlertRow]:
        with self._lock:
            return list(self.alerts.values())

    def silences_active(self) -> int:
        """Read afresh (cheap unless they changed): passes re-read the silences only while an
        alert fires, the only time they mute anything. A change read here is one the timer's
        poll (`Muter.changed`) would no longer see: while an alert fires, a pass follows at once."""
        with self._lock:
            if self._watch_silences and self.muter.changed():
                self._due_now()
            self.muter.load_silences(self.clock())
            return len(self.muter.active)

    # -- evaluation ---------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self._timer_pass()
            except Exception:
                log.exception("alert engine evaluation failed")
                wait = RETRY_SLEEP
            self._wake.wait(wait)
            self._wake.clear()

    def _timer_pass(self) -> float:
        """A pass when something is due (or MAX_SLEEP passed without one); returns how long to
        sleep. `process`, `reconfigure` and the first complete round wake the timer early when
        they make something due sooner."""
        with self._lock:
            now = self.clock()
            # A clock set back (now before the last pass) counts as MAX_SLEEP passed.
            ran = now >= self._due_at or not self._passed_at <= now < self._passed_at + MAX_SLEEP
            if not ran and self._watch_silences and not self._polled_at <= now < self._polled_at + SILENCE_POLL:
                self._polled_at = now
                ran = self.muter.changed()
            if ran:
                self.timer_passes += 1
                self.tick(now)
            wait = min(self._due_at - now, self._passed_at + MAX_SLEEP - now)
            if self._watch_silences:
                wait = min(wait, self._polled_at + SILENCE_POLL - now)
            if ran and self._due_at <= now:
                wait = RETRY_SLEEP
            wait = max(wait, MIN_SLEEP)
            self._sleeping_until = now + wait
            return wait

    def _due_now(self) -> None:
        """Have the timer run a pass at once (the caller holds the lock)."""
        self._due_at = -float("inf")
        self._wake.set()

    def _evaluate(self, now: float, observe: bool) -> None:
        """One pass, committed or not at all: a pass whose commit fails leaves the memory as it
        was before (see storagefault) and is done again STORAGE_RETRY later, or at once when the
        state folder was deleted and could be re-created."""
        for attempt in (1, 2):
            saved = SavePoint.take(self.alerts, self.groups.deadlines, self._am_last)
            try:
                self._pass(now, observe)
            except Exception as exc:  # a bug as much as a full disk: nothing uncommitted stays
                self._carry.update(saved.restore(self.alerts, self.groups.deadlines, self._am_last))
                if not isinstance(exc, STORAGE_ERRORS):
                    raise
                readonly = getattr(exc, "sqlite_errorname", "").startswith("SQLITE_READONLY")
                if attempt == 1 and self._heal(reopen=readonly):
                    observe = True  # the pass again, with what it had observed
                    continue
                self._storage_failed(exc, now)
                self._due_at = now + STORAGE_RETRY
                return
            self._storage_ok(now)
            return

    def _heal(self, reopen: bool = False) -> bool:
        """Re-create a deleted state folder or database (see AlertStore.heal); True if it did."""
        try:
            what = self.store.heal(reopen)
        except STORAGE_ERRORS as exc:  # the failed commit that follows is what reports it
            log.debug("cannot re-create the state folder now: %s", describe(exc))
            return False
        if what:
            log.error("%s (mode 0700, the database 0600); alerts, silences and queued notifications carried over",
                      what, extra={"event": "state_recreated"})
        return bool(what)

    def _pass(self, now: float, observe: bool) -> None:
        cfg = self.config.alerting
        self._passed_at = now
        tr = lifecycle.Transitions()
        if observe:
            lifecycle.observe(self.alerts, self._present, now, tr)
            if self._carry:
                apply_carry(self.alerts, self._carry, self._present)
        lifecycle.advance(self.alerts, self._present, now, cfg.for_rule, cfg.resolve_delay, tr)
        self._watch_silences = any(a.state == "firing" for a in self.alerts.values())
        if self._watch_silences or not observe:
            # Silences mute firing alerts only: a pass without one needs no look at them (the
            # timer's passes keep their hourly pruning going).
            self.muter.load_silences(now)
            self._polled_at = now
        mute = self._mute(tr)
        self._schedule(mute, now, tr.changed)
        notes = self._flush(mute, now, tr.changed)
        notes += self._reminders(mute, now, tr.changed)
        for batch in lifecycle.incident_resolutions(self.alerts, tr):
            # Alerts folded into the page without being shown (same event) are not listed either.
            notes.append(self._notification("resolved", [a for a in batch if a.last_notified] or batch, now))
        notes += self._am_refresh(mute, now)
        items: List[tuple] = []
        for n in notes:
            items += route(n, self.outbox.channels.values(), self.config.alerting.sends_direct)
        # State and notifications in one transaction, before any send: a kill between the two
        # would leave an alert marked as sent whose message was never queued.
        self.store.commit_alerts([self.alerts[fp] for fp in tr.changed if fp in self.alerts], tr.deleted, items,
                                 probe=not self.health.writable)
        self.outbox.wake([channel for channel, *_ in items])
        self._due_at = self._next_due(mute, now)

    # -- the state folder cannot be written -------------------------------------------------
    def _storage_failed(self, exc: BaseException, now: float) -> None:
        """A commit failed: count it; the first of an episode is logged and `state_unwritable` is
        sent directly (the outbox's memory queue), since the store is what fails."""
        h = self.health
        h.errors_total += 1
        h.error = describe(exc)
        if h.since is not None:
            log.debug("state folder still not writable: %s", h.error)
            self._refresh_unwritable(now)
            return
        h.since = now
        log.error("cannot write the state folder %s (%s): new alerts are held in memory and sent once it can be "
                  "written; retrying every %gs", self.config.paths.state_dir, h.error, STORAGE_RETRY,
                  extra={"event": "state_unwritable"})
        f = self._unwritable_finding()
        h.row = AlertRow(f.key, f.rule, f.severity, dict(f.labels), f.to_dict(), "firing", now, now, now)
        self._send_direct("firing", h.row, now)
        h.refreshed = {ch.name: now for ch in self.outbox.channels.values() if ch.type == "alertmanager"}

    def _refresh_unwritable(self, now: float) -> None:
        """Alertmanager forgets a firing alert after its `alert_ttl` unless it is sent again: the
        episode's alert is, every `resend_interval`, as `_am_refresh` does for the stored ones."""
        h = self.health
        for ch in self.outbox.channels.values():
            if h.row is None or ch.type != "alertmanager" or ch.name not in h.refreshed:
                continue
            if now - h.refreshed[ch.name] >= ch.cfg.resend_interval:
                h.refreshed[ch.name] = now
                note = dict(self._notification("refresh", [h.row], now), only=ch.name)
                self.outbox.send_from_memory(route(note, [ch], self.config.alerting.sends_direct))

    def _storage_ok(self, now: float) -> None:
        self._carry.clear()
        h = self.health
        if h.since is None:
            return
        log.warning("the state folder %s can be written again after %.0fs; held alerts go out now",
                    self.config.paths.state_dir, now - h.since, extra={"event": "state_writable"})
        if h.row is not None:
            h.row.last_seen = now
            self._send_direct("resolved", h.row, now)
        h.since, h.error, h.row, h.refreshed = None, "", None, {}

    def _unwritable_finding(self) -> Finding:
        """The finding of the current episode; its evidence names the findings whose alerts wait."""
        held = [f"{f.rule}: {f.summary}" for fp, f in sorted(self._present.items())
                if not (fp in self.alerts and self.alerts[fp].notified)]
        return unwritable_finding(self.config, self.config.paths.state_dir, self.health.error,
                                  self.health.since or self.clock(), held)

    def _send_direct(self, kind: str, row: AlertRow, now: float) -> None:
        """Through the channels' senders, from memory: nothing of this touches the state folder."""
        items = route(self._notification(kind, [row], now), self.outbox.channels.values(),
                      self.config.alerting.sends_direct)
        self.outbox.send_from_memory(items)

    def _next_due(self, mute: Dict[str, Optional[str]], now: float) -> float:
        """The earliest time a pass without new findings could change something: the state
        machine's next transition, an open group's window, a reminder, an Alertmanager refresh,
        a silence starting or ending. Each term mirrors a time test of this pass."""
        cfg = self.config.alerting
        times = [lifecycle.next_transition(self.alerts, self._present, cfg.for_rule, cfg.resolve_delay),
                 self.muter.next_change(now)]
        times += self.groups.deadlines.values()
        if cfg.reminder > 0:
            times += [a.last_notified + cfg.reminder for a in self.alerts.values()
                      if a.state == "firing" and a.notified and not mute.get(a.fp) and a.last_notified is not None]
        times += [self._am_last[ch.name] + ch.cfg.resend_interval for ch in self.outbox.channels.values()
                  if ch.type == "alertmanager" and ch.name in self._am_last]
        return min(times)

    def _mute(self, tr: lifecycle.Transitions) -> Dict[str, Optional[str]]:
        """Why each firing alert is muted now (None: not muted). Evidence is requested for what just
        fired and is not muted: a symptom that fired in the same pass as its root runs no capture."""
        rules = self.config.alerting.inhibitions
        index = FiringIndex.build(self.alerts.values(), rules)
        mute = {a.fp: self.muter.reason(a, index, rules) for a in self.alerts.values() if a.state == "firing"}
        for a in tr.fired:
            if mute.get(a.fp) is None:
                self._request_snapshot(a)
        for a in self.alerts.values():
            if a.state == "firing" and a.notified and a.muted != mute[a.fp]:
                a.muted = mute[a.fp]
                tr.changed.add(a.fp)
        self._fold_same_event(mute, index, tr.changed)
        return mute

    def _fold_same_event(self, mute: Dict[str, Optional[str]], index: FiringIndex, changed: Set[str]) -> None:
        """An alert muted by a same-event peer that has paged joins that page's incident: it is
        never paged on its own (not even when the peer resolves first) and the incident resolves
        only when it has cleared too."""
        rules = self.config.alerting.inhibitions
        for a in self.alerts.values():
            reason = mute.get(a.fp) or ""
            if a.state != "firing" or a.notified or not reason.startswith("inhibited:"):
                continue
            src = reason.split(":", 1)[1]
            if not mutual(rules, src, a.rule):
                continue
            peer = self.alerts.get(source_alert(a, src, index, rules) or "")
            if peer is not None and peer.notified and peer.incident:
                a.notified, a.incident, a.muted = True, peer.incident, reason
                log.info("alert %s folded into the page of %s (same event)", a.rule, peer.rule,
                         extra={"event": "alert_folded"})
                changed.add(a.fp)

    def _schedule(self, mute: Dict[str, Optional[str]], now: float, changed: Set[str]) -> None:
        """Open the group of every firing alert not yet sent; record why a muted one waits."""
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
                continue
            released = bool(a.muted) and a.fp in self._present  # its silence ended or its cause cleared
            self.groups.add(a, now, self.config.alerting.group_window, at_once=released)

    def _flush(self, mute: Dict[str, Optional[str]], now: float, changed: Set[str]) -> List[Dict[str, Any]]:
        notes = []
        for g in self.groups.due(now):
            batch = []
            for a in self.alerts.values():
                if a.state != "firing" or a.notified or group_key(a) != g:
                    continue
                if a.fp not in self._present or mute.get(a.fp):
                    # Muted, or its condition already cleared (e.g. together with the root cause
                    # that held it back): on its way to resolving, nobody needs a page for it now.
                    continue
                if a.muted and not a.snapshot:
                    self._request_snapshot(a)  # held back until now: capture before sending
                a.notified, a.last_notified, a.muted = True, now, None
                batch.append(a)
                changed.add(a.fp)
            if batch:
                note = self._notification("firing", batch, now)
                for a in batch:
                    a.incident = a.incident or note["ikey"]
                notes.append(note)
        return notes

    def _reminders(self, mute: Dict[str, Optional[str]], now: float, changed: Set[str]) -> List[Dict[str, Any]]:
        every = self.config.alerting.reminder
        if every <= 0:
            return []
        due: Dict[str, List[AlertRow]] = {}
        for a in self.alerts.values():
            if a.state == "firing" and a.notified and not mute.get(a.fp) and a.last_notified is not None \
                    and now - a.last_notified >= every:
                a.last_notified = now
                due.setdefault(group_key(a), []).append(a)
                changed.add(a.fp)
        return [self._notification("reminder", batch, now) for batch in due.values()]

    def _am_refresh(self, mute: Dict[str, Optional[str]], now: float) -> List[Dict[str, Any]]:
        """Alertmanager wants firing alerts re-sent before their endsAt."""
        notes = []
        for ch in self.outbox.channels.values():
            if ch.type != "alertmanager":
                continue
            last = self._am_last.setdefault(ch.name, now)
            if now - last >= ch.cfg.resend_interval:
                self._am_last[ch.name] = now
                live = [a for a in self.alerts.values() if a.state == "firing" and a.last_notified is not None
                        and not mute.get(a.fp)]
                if live:
                    notes.append(dict(self._notification("refresh", live, now), only=ch.name))
        return notes

    def _request_snapshot(self, a: AlertRow) -> None:
        """Ask for the evidence bundle of an alert that will be sent. An inhibited or silenced
        symptom gets none while muted (py-spy on every rank costs), and asks when it is released."""
        f = self._present.get(a.fp)
        snaps = self.runtime.services.get("snapshots") if self.runtime is not None else None
        if snaps is not None and f is not None and not a.snapshot:
            try:
                a.snapshot = snaps.request(f)
                if a.snapshot:
                    log.warning("snapshot of %s: %s", a.rule, a.snapshot, extra={"event": "snapshot_requested"})
            except Exception as exc:
                log.error("snapshot request for %s failed: %s: %s", a.rule, type(exc).__name__, exc)

    def _alert_body(self, a: AlertRow, status: str, now: float) -> Dict[str, Any]:
        f = a.finding
        cfg = self.config.alerting
        ev = list(f.get("evidence") or [])[-cfg.max_log_lines:] if cfg.max_log_lines else []
        return {
            "fp": a.fp, "rule": a.rule, "severity": a.severity, "status": status,
            "summary": f.get("summary", ""), "labels": dict(a.labels), "hint": f.get("hint", ""),
            "value": f.get("value"), "since": f.get("since") or a.firing_since, "starts_at": a.firing_since,
            "ends_at": (a.last_seen if status == "resolved" else None), "evidence": ev, "snapshot": a.snapshot,
            "dashboard": dashboard_link(cfg.dashboard_url, a.labels, a.rule),
            # Matching lines behind a log finding (titles say "5 lines"); None for other rules.
            "count": _count((f.get("details") or {}).get("count")),
            # A job-level alert's ranks on this node (the fleet relay counts them).
            "ranks": (f.get("details") or {}).get("job_ranks"),
        }

    def _notification(self, kind: str, batch: List[AlertRow], now: float) -> Dict[str, Any]:
        status = "resolved" if kind == "resolved" else "firing"
        batch = sorted(batch, key=lambda a: (-SEVERITY_RANK.get(a.severity, 0), a.rule, sorted(a.labels.items())))
        first = batch[0].labels
        fps = ",".join(a.fp for a in batch)
        ikey = hashlib.sha256(f"{kind}|{fps}|{now:.6f}".encode()).hexdigest()[:20]
        for a in batch:
            log.info("notify %s %s: %s", kind, a.rule, a.finding.get("summary", ""),
                     extra={"event": f"notify_{kind}", "ikey": ikey})
        return {"kind": kind, "status": status, "ikey": ikey, "created": now,
                "group": {k: first.get(k, "") for k in GROUP_LABELS},
                "alerts": [self._alert_body(a, status, now) for a in batch]}


def _count(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def build_engine(config: Config, runtime: Any) -> AlertEngine:
    """The daemon's engine. `runtime.services` may hold a snapshot taker (see watchdog.snapshots);
    the engine registers its outbox there as "outbox" for the metrics."""
    engine = AlertEngine(config, runtime)
    if runtime is not None:
        runtime.services["outbox"] = engine.outbox
    return engine

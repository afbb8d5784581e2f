"""The alert engine's shell: findings in, notifications (committed to the outbox) out.

The engine is the only component with memory of what already fired; detectors stay pure. The
decisions are made by its pure core (watchdog.alerting.decide.core), which wires four parts kept apart
as in Alertmanager:

- `lifecycle`: the pure state machine (pending -> firing -> resolved, `for`, resolve delay, and
  the restart rule: an alert restored from disk is held until its detector has warmed up);
- `muting`: silences and inhibitions (a firing root cause mutes its symptoms);
- `grouping`: the alerts of one host and job that fire together share one message (alerts about
  the watchdog itself get messages of their own);
- `routing`: which channel takes which alerts.

A resolved alert that was notified sends a resolved message, then its state is deleted, so the
next incident pages again. Reminders repeat while firing. Muted alerts that were never sent are
sent at once when their silence ends or their root cause clears (if they still hold).

This shell does what the core must not: it holds the lock, owns the timer thread (see
watchdog.alerting.timer), reads the silences, commits each pass's state and notifications in one
SQLite transaction (so a restart neither re-pages what was sent nor forgets what is firing),
wakes the outbox's senders, and rolls a pass back when its commit fails (storagefault). The
daemon builds the store, the outbox, the dead-man pinger and the snapshot requester and hands
them in. The clock is injected, so tests drive the engine on a fake clock (`timer=False`, then
`tick`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import AbstractSet, Callable, Dict, List, Optional, Tuple

from watchdog.host.clock import CLOCK
from watchdog.alerting.decide import lifecycle
from watchdog.alerting.decide.core import EngineCore, SnapshotRequester
from watchdog.alerting.silences import Muter
from watchdog.alerting.deliver.outbox import DeadMan, Outbox
from watchdog.alerting.decide.storagefault import STORAGE_ERRORS, STORAGE_RETRY, RedoQuiet, StorageHealth, describe
from watchdog.alerting.deliver.rebuild import storage_fault
from watchdog.alerting.deliver.store import AlertRow, AlertStore
from watchdog.alerting.timer import MAX_SLEEP, EngineTimer, Schedule
from watchdog.alerting.unwritable import UnwritableEpisode
from watchdog.config.schema import Config
from watchdog.detectors.selfstate import unwritable_finding
from watchdog.core.findings import Finding
from watchdog.core.rulecatalog import release_hold, warmup

log = logging.getLogger("watchdog.alerts")

__all__ = ["AlertEngine", "MAX_SLEEP"]


class AlertEngine:
    """Takes ownership of the parts it is given: `close` stops the outbox and the dead-man
    pinger and closes the store, after the timer and before the store."""

    def __init__(self, config: Config, store: AlertStore, outbox: Outbox, deadman: DeadMan,
                 snapshots: Optional[SnapshotRequester] = None, clock: Callable[[], float] = CLOCK.now,
                 timer: bool = True):
        self.config = config
        self.store = store
        self.outbox = outbox
        self.deadman = deadman
        self.snapshots = snapshots
        self.clock = clock
        self._lock = threading.RLock()
        alerts = store.load_alerts()
        lifecycle.restore(alerts, clock(), lambda a: warmup(a.rule, self.config, a.finding))
        if alerts:
            log.info("restored %d alert(s) from %s (%d firing), held until their detectors warm up",
                     len(alerts), store.path, sum(1 for a in alerts.values() if a.state == "firing"))
        self.core = EngineCore(config.alerting, alerts, store.load_interruptions(),
                               release_hold=lambda a: release_hold(a.rule, self.config))
        self.muter = Muter(store)
        self.episode = UnwritableEpisode(outbox)
        #: The findings of the last detector pass, as the detectors listed them.
        self._current: List[Finding] = []
        self._have_findings = False
        self._first_round = False
        self._quiet = RedoQuiet(self.core.carry)
        lifecycle.log.addFilter(self._quiet)
        self.schedule = Schedule(due_at=float("inf"), passed_at=clock(), polled_at=clock())
        #: Timer passes run (a test counts them).
        self.timer_passes = 0
        self.timer = EngineTimer(self._timer_pass)
        if timer:
            self.timer.start()

    @property
    def health(self) -> StorageHealth:
        return self.episode.health

    # -- the daemon's interface --------------------------------------------------------------
    def process(self, findings: List[Finding], now: Optional[float] = None,
                blind: AbstractSet[str] = frozenset()) -> None:
        """A detector pass's findings; `blind`: the rules whose probes cannot see now (their
        firing alerts are held, see `Rule.observes`)."""
        with self._lock:
            now = self.clock() if now is None else now
            # Nothing found, nothing was found, no alert, nothing due: the pass would change
            # nothing (the idle daemon's every detector pass), so it is not run.
            idle = not findings and not self.core.present and not self.core.alerts and self._have_findings \
                and now < self.schedule.due_at
            self._current = list(findings)
            self.core.see(findings, blind)
            self._have_findings = True
            if idle:
                return
            self._evaluate(now, observe=True)
            if self.schedule.due_at < self.schedule.sleeping_until:
                self.timer.wake.set()  # something is due before the timer would wake

    def tick(self, now: Optional[float] = None) -> None:
        """A timer pass: group windows, resolve delays, reminders, silence expiry."""
        with self._lock:
            now = self.clock() if now is None else now
            self.schedule.passed_at = now
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
            self.core.config = config.alerting
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
                self.core.first_round(self.clock())
                self._due_now()  # the restored alerts' holds end sooner
        self.deadman.ping()

    def close(self) -> None:
        lifecycle.log.removeFilter(self._quiet)
        self.timer.close()
        self.outbox.stop()
        self.deadman.close()
        with self._lock:
            try:
                self.store.save_alerts(list(self.core.alerts.values()), [])
            except STORAGE_ERRORS as exc:  # the last committed state stays: what was sent is in it
                log.error("could not save the alert state at shutdown: %s", describe(exc))
            self.store.close()

    # -- read side (metrics, status) ----------------------------------------------------------
    def alert_states(self) -> List[AlertRow]:
        with self._lock:
            return list(self.core.alerts.values())

    def interruptions(self) -> Dict[Tuple[str, str], int]:
        """Interruptions paged, by (domain, cause), as the engine's passes counted them (a copy)."""
        with self._lock:
            return dict(self.core.interruptions)

    def silences_active(self) -> int:
        """Read afresh (cheap unless they changed): passes re-read the silences only while an
        alert fires, the only time they mute anything. A change read here is one the timer's
        poll (`Muter.changed`) would no longer see: while an alert fires, a pass follows at once."""
        with self._lock:
            if self.schedule.watch_silences and self.muter.changed():
                self._due_now()
            self.muter.load_silences(self.clock())
            return len(self.muter.active)

    # -- evaluation ---------------------------------------------------------------------------
    def _timer_pass(self) -> float:
        """A pass when something is due (or MAX_SLEEP passed without one); returns how long to
        sleep. `process`, `reconfigure` and the first complete round wake the timer early when
        they make something due sooner."""
        with self._lock:
            now = self.clock()
            s = self.schedule
            ran = s.pass_due(now)
            if not ran and s.poll_due(now):
                s.polled_at = now
                ran = self.muter.changed()
            if ran:
                self.timer_passes += 1
                self.tick(now)
            return s.next_wait(now, ran)

    def _due_now(self) -> None:
        """Have the timer run a pass at once (the caller holds the lock)."""
        self.schedule.due_at = -float("inf")
        self.timer.wake.set()

    def _evaluate(self, now: float, observe: bool) -> None:
        """One pass, committed or not at all: a pass whose commit fails leaves the memory as it
        was before (see storagefault) and is done again STORAGE_RETRY later, or at once when the
        state folder was deleted and could be re-created."""
        for attempt in (1, 2):
            saved = self.core.savepoint()
            try:
                self._pass(now, observe)
            except Exception as exc:  # a bug as much as a full disk: nothing uncommitted stays
                self.core.rollback(saved)
                if not isinstance(exc, STORAGE_ERRORS):
                    raise
                readonly = getattr(exc, "sqlite_errorname", "").startswith("SQLITE_READONLY")
                if attempt == 1 and (self._heal(reopen=readonly) or self._rebuild_if_damaged(exc)):
                    observe = True  # the pass again, with what it had observed
                    continue
                self.episode.failed(exc, now, self.config.paths.state_dir, self._unwritable_finding)
                self.schedule.due_at = now + STORAGE_RETRY
                return
            self.core.carry.clear()
            self.episode.ok(now, self.config.paths.state_dir)
            return

    def _pass(self, now: float, observe: bool) -> None:
        """The core's pass between reading the silences and committing what it decided."""
        s = self.schedule
        s.passed_at = now
        tr = self.core.advance(now, observe)
        s.watch_silences = self.core.firing()
        if s.watch_silences or not observe:
            # Silences mute firing alerts only: a pass without one needs no look at them (the
            # timer's passes keep their hourly pruning going).
            self.muter.load_silences(now)
            s.polled_at = now
        result = self.core.settle(now, tr, self.muter.view(now), list(self.outbox.channels.values()),
                                  self.snapshots)
        # State and notifications in one transaction, before any send: a kill between the two
        # would leave an alert marked as sent whose message was never queued.
        self.store.commit_alerts(result.changed, result.deleted, result.items, probe=not self.health.writable,
                                 interruptions=dict(result.interruptions))
        self.outbox.wake([item.channel for item in result.items])
        s.due_at = result.due_at

    def _heal(self, reopen: bool = False) -> bool:
        """Re-create a deleted state folder or database (see AlertStore.heal); True if it did."""
        try:
            what = self.store.heal(reopen)
        except STORAGE_ERRORS as exc:  # the failed commit that follows is what reports it
            log.debug("cannot re-create the state folder now: %s", describe(exc))
            return False
        if what:
            log.error("%s", what, extra={"event": "state_recreated"})
        return bool(what)

    def _rebuild_if_damaged(self, exc: BaseException) -> bool:
        """A commit failed on a database damaged in place (not a disk fault): set it aside and
        rebuild it from memory (see AlertStore.replace_damaged); True if it did."""
        if not isinstance(exc, sqlite3.Error) or storage_fault(exc) or self.store.unopened:
            return False
        why = self.store.damaged()
        if why is None:
            return False
        try:
            what = self.store.replace_damaged(why, list(self.core.alerts.values()), self.muter.known())
        except STORAGE_ERRORS as exc2:
            log.debug("cannot rebuild the damaged alert state now: %s", describe(exc2))
            return False
        log.error("%s", what, extra={"event": "state_damaged"})
        return True

    def _unwritable_finding(self) -> Finding:
        """The finding of the current episode; its evidence names the findings whose alerts wait."""
        return unwritable_finding(self.config, self.config.paths.state_dir, self.health.error,
                                  self.health.since or self.clock(), self.core.held())

"""Which probes have finished a round: the first round of all (READY=1), a full round of all (the
alerting dead-man ping), and whether rounds still complete on time (the systemd watchdog ping)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, Mapping, Optional, Set

from watchdog.probes.base import Probe

log = logging.getLogger("watchdog.scheduler")


class RoundTracker:
    def __init__(self, on_complete_round: Optional[Callable[[], None]] = None,
                 on_first_round: Optional[Callable[[], None]] = None):
        #: Called when every probe has finished a round (none timed out or hung) since the last call.
        self.on_complete_round = on_complete_round
        #: Called once, as soon as every probe has finished its first round (READY=1 follows).
        self.on_first_round = on_first_round
        self._lock = threading.Lock()
        self._first_done: Dict[str, threading.Event] = {}
        self._first_round_fired = False
        self._round_done: Set[str] = set()
        #: When each probe's latest round ended (monotonic).
        self._completed: Dict[str, float] = {}

    def register(self, name: str) -> None:
        with self._lock:
            self._first_done.setdefault(name, threading.Event())

    def ended(self, name: str) -> None:
        """A round of `name` ended (whatever its outcome); the first-round hook may fire."""
        self._completed[name] = time.monotonic()
        with self._lock:
            ev = self._first_done.get(name)
        if ev is not None:
            ev.set()
        with self._lock:
            if self._first_round_fired or not all(e.is_set() for e in self._first_done.values()):
                return
            self._first_round_fired = True
        if self.on_first_round is not None:
            try:
                self.on_first_round()
            except Exception:
                log.exception("first-round hook failed")

    def note_round(self, name: str, complete: bool, probes: Mapping[str, Probe]) -> None:
        """After the round's detector pass: a full round of every probe fires the complete-round hook."""
        if self.on_complete_round is None:
            return
        with self._lock:
            if not complete:
                self._round_done.discard(name)
                return
            self._round_done.add(name)
            if not probes or not set(probes) <= self._round_done:
                return
            self._round_done = set()
        try:
            self.on_complete_round()
        except Exception:
            log.exception("complete-round hook failed")

    def wait_first_round(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            events = list(self._first_done.values())
        for ev in events:
            if not ev.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def completing(self, last_tick: float, budgets: Dict[str, float], now: float) -> bool:
        """True if the scheduler loop ticks and every probe's rounds complete on time (each
        within its budget: interval + timeout + jitter + a margin).

        This gates the systemd watchdog ping: a wedged scheduler (or a round wrapper that itself
        hangs) stops the pings and systemd restarts the daemon. A probe that merely fails or times
        out still completes its round wrapper, so it does not stop the pings.
        """
        if now - last_tick > 30:
            return False
        return not any(self.overdue(name, budget, now) for name, budget in budgets.items())

    def overdue(self, name: str, budget: float, now: float) -> bool:
        """Whether the probe's last round ended longer than `budget` ago (never, before its first)."""
        last = self._completed.get(name)
        return last is not None and now - last > budget

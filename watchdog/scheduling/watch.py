"""Settles every probe round exactly once: when it finishes, or when its time is up first.

A round runs in its probe's worker thread (`rounds.RoundWorker`). A round that finishes in time
is settled (recorded, its batch handed to the detector pass, its probe's turn given back) in that
same worker thread, at once. One watch thread is there only for rounds that overrun: it sleeps
until the earliest deadline of the rounds under way and settles those still running then.

Why not settle everything in the watch thread, as before: that woke it twice per round (a round
handed over, a round done) and handed every result from one thread to another, about a tenth of
the idle daemon's wake-ups (bench/bench_footprint.py counts them per thread). Now it wakes when
the first round of a batch is handed over while it sleeps without a deadline, and once at that
round's deadline: two wake-ups per batch of rounds, none per round, and one per overrun.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from watchdog.scheduling.rounds import Round

log = logging.getLogger("watchdog.scheduler")

#: Called once per round: True when it finished, False when its time was up first.
Settle = Callable[[bool], None]


class RoundWatch:
    """Settles each watched round when it finishes (in its worker) or its deadline passes."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: Dict[Round, Tuple[float, Settle]] = {}
        #: The deadline the watch thread sleeps until (None: no round under way, no deadline).
        self._sleeping_until: Optional[float] = None
        self._stopped = False
        self.thread = threading.Thread(target=self._loop, name="rounds", daemon=True)
        self.thread.start()

    def watch(self, rnd: Round, timeout: float, settle: Settle) -> None:
        """Watch `rnd` (call before its worker starts it): `settle` runs once, in the worker's
        thread when the round finishes in time, else in this watch's thread at the deadline."""
        deadline = time.monotonic() + timeout
        rnd.on_done = lambda: self._finished(rnd)
        with self._cond:
            self._pending[rnd] = (deadline, settle)
            if self._sleeping_until is None or deadline < self._sleeping_until:
                self._cond.notify()  # it sleeps past this deadline: wake it to sleep until this one

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _finished(self, rnd: Round) -> None:
        """In the round's worker thread, once the round is done: settle it here unless the watch
        thread has settled it already (its time was up)."""
        with self._cond:
            entry = self._pending.pop(rnd, None)
        if entry is not None:
            _settle_once(rnd, entry[1], True)

    def _overdue(self) -> List[Tuple[Round, Settle]]:
        """Rounds whose time is up and which are still running (removed from watch)."""
        now = time.monotonic()
        out = []
        for rnd, (deadline, settle) in list(self._pending.items()):
            if now >= deadline and not rnd.done.is_set():
                del self._pending[rnd]
                out.append((rnd, settle))
        return out

    def _next_deadline(self) -> Optional[float]:
        return min((d for d, _ in self._pending.values()), default=None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                due = self._overdue()
                while not due and not self._stopped:
                    self._sleeping_until = self._next_deadline()
                    wait = None if self._sleeping_until is None else max(0.0, self._sleeping_until - time.monotonic())
                    self._cond.wait(wait)
                    due = self._overdue()
                self._sleeping_until = None
                if not due:
                    return
            for rnd, settle in due:
                _settle_once(rnd, settle, False)


def _settle_once(rnd: Round, settle: Settle, finished: bool) -> None:
    try:
        settle(finished)
    except Exception:  # one round's bookkeeping must not stop the others'
        log.exception("settling a round of probe %s failed", rnd.probe.name)
    finally:
        rnd.settled.set()

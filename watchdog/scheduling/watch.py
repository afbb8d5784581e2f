"""The one thread that settles probe rounds.

A round runs in its probe's worker thread (`rounds.RoundWorker`). It is settled (recorded, its
batch handed to the detector pass, its probe's turn given back) when it finishes or when its time
is up, whichever comes first, exactly once. Before, each round also held a scheduler pool thread
that only waited on it with a time-out: six probes meant six threads asleep beside the six that
worked. One thread waiting on the earliest deadline does that job for all of them.
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
    """Settles each watched round when it finishes or its deadline passes (one thread for all)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: Dict[Round, Tuple[float, Settle]] = {}
        self._stopped = False
        threading.Thread(target=self._loop, name="rounds", daemon=True).start()

    def watch(self, rnd: Round, timeout: float, settle: Settle) -> None:
        """Watch `rnd` (call before its worker starts it): `settle` runs in this watch's thread."""
        rnd.on_done = self._wake
        with self._cond:
            self._pending[rnd] = (time.monotonic() + timeout, settle)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _due(self) -> List[Tuple[Round, Settle, bool]]:
        """Rounds to settle now: finished ones, then those whose time is up (removed from watch)."""
        now = time.monotonic()
        out = []
        for rnd, (deadline, settle) in list(self._pending.items()):
            if rnd.done.is_set() or now >= deadline:
                del self._pending[rnd]
                out.append((rnd, settle, rnd.done.is_set()))
        return out

    def _wait(self) -> Optional[float]:
        if not self._pending:
            return None
        return max(0.0, min(d for d, _ in self._pending.values()) - time.monotonic())

    def _loop(self) -> None:
        while True:
            with self._cond:
                due = self._due()
                while not due and not self._stopped:
                    self._cond.wait(self._wait())
                    due = self._due()
                if not due:
                    return
            for rnd, settle, finished in due:
                try:
                    settle(finished)
                except Exception:  # one round's bookkeeping must not stop the others'
                    log.exception("settling a round of probe %s failed", rnd.probe.name)
                finally:
                    rnd.settled.set()

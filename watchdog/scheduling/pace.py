"""Which probes run at their own interval and which, having nothing to watch on this node, run
rarely (`Collected.idle`: the links probe where no hccn_tool exists).

Why: a probe with nothing to watch still woke the daemon at its interval (every 5 s for links)
for a round that could only say so again; on a VM each wake-up costs a share of a millisecond
(docs/architecture.md, "Threads and wake-ups"). It keeps looking, every IDLE_SECONDS, so a tool
installed later is taken up within a minute.
"""

from __future__ import annotations

import threading
from typing import Optional, Set

from watchdog.scheduling.rounds import Round

#: How often a probe with nothing to watch runs, until one of its rounds finds something.
IDLE_SECONDS = 60.0


class IdlePacing:
    """The probes running every IDLE_SECONDS for now (rounds settle in several threads)."""

    def __init__(self) -> None:
        self._idle: Set[str] = set()
        self._lock = threading.Lock()

    def interval(self, name: str, own: float) -> float:
        """The interval `name` runs at now: `own`, or IDLE_SECONDS while it has nothing to watch."""
        with self._lock:
            return max(own, IDLE_SECONDS) if name in self._idle else own

    def settled(self, name: str, rnd: Round, finished: bool) -> Optional[float]:
        """After a round: the probe's new interval when the round moved it (to IDLE_SECONDS or
        back to its own), else None. Only a round that says so keeps a probe idle: one that failed
        or timed out (the tool is there now, and fails) brings it back to its own interval, so its
        failure is confirmed and reported at its own pace."""
        own = rnd.probe.interval
        if own >= IDLE_SECONDS:
            return None
        idle = finished and rnd.error is None and rnd.result is not None and rnd.result.idle
        with self._lock:
            if idle == (name in self._idle):
                return None
            (self._idle.add if idle else self._idle.discard)(name)
        return IDLE_SECONDS if idle else own

    def forget(self, name: str) -> None:
        """A probe replaced or removed by a reload starts at its own interval again."""
        with self._lock:
            self._idle.discard(name)

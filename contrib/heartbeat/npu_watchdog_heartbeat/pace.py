"""Throughput as the training loop experiences it: work done over wall time between step ENDS.

Timing a step from its own begin to its end leaves out the data loader, the very thing that
starves an input-bound job; readings also swing wildly (a step that overlaps an asynchronous
device launch looks 10x faster than the next). Measuring end to end over a short sliding window
counts every second the job spent, whatever it spent it on.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Deque, Optional, Tuple


class Pace:
    """Rate of `amount` per second over the last `window` step ends (default: 10)."""

    def __init__(self, window: int = 10, clock: Any = time.monotonic):
        self._ends: Deque[Tuple[float, float]] = collections.deque(maxlen=max(2, int(window)) + 1)
        self._clock = clock

    def start(self) -> None:
        """Mark the start of the first step (training begins): its time counts too."""
        self._ends.clear()
        self._ends.append((self._clock(), 0.0))

    def pause(self) -> None:
        """Forget the open interval (after eval or a checkpoint, which are not training time)."""
        self.start()

    def step_end(self, amount: Optional[float]) -> Optional[float]:
        """Record one step end that did `amount` of work; the windowed rate, or None before two ends."""
        now = self._clock()
        if amount is None:
            return None
        self._ends.append((now, float(amount)))
        if len(self._ends) < 2:
            return None
        took = self._ends[-1][0] - self._ends[0][0]
        done = sum(a for _, a in list(self._ends)[1:])
        return done / took if took > 0 else None

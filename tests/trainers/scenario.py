"""The incident every trainer script below plays, on wall-clock time so all frameworks match.

    fast   6 s    a healthy baseline (the loader waits FAST_DELAY per batch)
    pause         one evaluation and one checkpoint save, each made to last PAUSE_SECONDS
    slow   6 s    the data loader starves (SLOW_DELAY per batch): a throughput drop
    nan    2.5 s  the loss is NaN (a constant added outside the graph: weights stay finite)
    tail   2 s    healthy again, then the script ends training normally (phase `done`)

Imported by the trainer scripts (run as subprocesses with this folder on PYTHONPATH); it needs
nothing but the standard library.
"""

from __future__ import annotations

import time
from typing import Optional

FAST, SLOW, NAN, TAIL = 6.0, 6.0, 2.5, 2.0
FAST_DELAY, SLOW_DELAY = 0.02, 0.2
PAUSE_SECONDS = 1.5
#: The heartbeat throttle the scripts use (the default 10 s is too slow for a 20 s run).
MIN_INTERVAL = 0.5


class Scenario:
    def __init__(self) -> None:
        self.t0: Optional[float] = None
        self.resumed: Optional[float] = None

    def stage(self) -> str:
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now
        if self.resumed is None:
            return "fast" if now - self.t0 < FAST else "pause"
        e = now - self.resumed
        for name, end in (("slow", SLOW), ("nan", SLOW + NAN), ("tail", SLOW + NAN + TAIL)):
            if e < end:
                return name
        return "end"

    def pause_due(self) -> bool:
        return self.stage() == "pause"

    def pause_done(self) -> None:
        self.resumed = time.monotonic()

    def load_delay(self) -> None:
        """Called by the data loader for each batch."""
        time.sleep(SLOW_DELAY if self.stage() == "slow" else FAST_DELAY)

    def loss_offset(self) -> float:
        return float("nan") if self.stage() == "nan" else 0.0

    def finished(self) -> bool:
        return self.stage() == "end"


SCENARIO = Scenario()

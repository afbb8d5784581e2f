"""`/healthz`: is the daemon watching? (503 with the reason when it cannot vouch for anything)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence, Tuple

from watchdog.host import clock
from watchdog.runtime import StorageHealthView
from watchdog.core.state import ProbeStatus

#: /healthz turns 503 when the main loop has not turned for this long (it turns at least every
#: 10 s: just after each tick, 5 s or 10 s at idle).
LOOP_STALL_SECONDS = 25.0


@dataclass(frozen=True)
class Liveness:
    """What the main loop and the scheduler say of themselves at the moment of the check."""

    stopping: bool
    #: time.monotonic() of the main loop's last turn.
    loop_beat: float
    #: The first round of every probe was evaluated (READY=1 sent).
    ready: bool
    completing_rounds: Callable[[], bool]


def health(live: Liveness, statuses: Callable[[], Sequence[ProbeStatus]],
           storage: Callable[[], StorageHealthView]) -> Tuple[bool, str]:
    """(watching, reason); probes down and an unwritable state folder are said but stay 200:
    the daemon still watches, new alerts wait."""
    if live.stopping:
        return False, "stopping"
    stalled = time.monotonic() - live.loop_beat
    if stalled > LOOP_STALL_SECONDS:
        return False, f"main loop has not turned for {stalled:.0f}s"
    if not live.ready:
        return False, "starting: the first probe round has not completed"
    if not live.completing_rounds():
        return False, "scheduler is not completing rounds"
    notes = []
    down = [s.name for s in statuses() if not s.up and s.runs_total > 0]
    if down:
        notes.append("probes down: " + ", ".join(sorted(down)))
    # Still watching (200), but new alerts wait: said here so a health check shows it.
    st = storage()
    if not st.writable:
        notes.append(f"state folder not writable for {max(0.0, clock.now() - (st.since or 0)):.0f}s "
                     f"({st.error}); new alerts are held until it is")
    return True, "ok" + (" (" + "; ".join(notes) + ")" if notes else "")

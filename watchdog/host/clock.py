"""The daemon's clock: wall-clock seconds that never step.

Why: durations judged on the wall clock break when it steps. A VM resumed after two hours, or
chrony stepping a clock that was wrong at boot, moved `time.time()` by hours at once: an open
incident resolved within a second (its log match looked hours old), a healthy rank's heartbeat
looked stale; stepped back, a retry came an hour late and a rank that had just died looked
fresh for an hour.

`now()` is the wall clock read once at start plus the monotonic time since: seconds since the
epoch like `time.time()`, so every record, threshold and stored time keeps its meaning, but a
step of the wall clock does not move it. `to_wall` turns one of its times into the wall clock's
frame of this moment, for what leaves the daemon (message texts, Alertmanager's startsAt and
endsAt); `from_wall` does the reverse for times that other processes wrote (a heartbeat's
timestamp, a file's mtime). `check` notices a step (the two clocks drifting apart by more than
STEP_SECONDS between two looks) and says so once per step.

Across a restart the clock starts again from the wall clock: stored times of an earlier life
are off by the steps that life saw (their readers bound what that can cost).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

log = logging.getLogger("watchdog.clock")

#: A change of the wall clock's offset larger than this between two looks is a step (NTP slews
#: by at most 0.5 ms/s; a look comes every few seconds).
STEP_SECONDS = 2.0


class SteadyClock:
    """Wall-clock seconds carried by the monotonic clock (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mono0 = time.monotonic()
        self._wall0 = time.time()
        #: The wall clock's offset at the last look (wall - steady).
        self._offset = 0.0
        #: Its offset after the last step (0.0 until one): the conversions use this, so without a
        #: step a time converts to itself exactly (microseconds of drift are no step).
        self._stepped = 0.0
        #: Steps seen, and the steady time and size of the last one.
        self.steps_total = 0
        self.last_step_at: Optional[float] = None
        self.last_step = 0.0

    def now(self) -> float:
        return self._wall0 + (time.monotonic() - self._mono0)

    def offset(self) -> float:
        """Seconds the wall clock is ahead of this clock now (negative: behind)."""
        return time.time() - self.now()

    def to_wall(self, ts: float) -> float:
        """A time of this clock in the wall clock's frame of now."""
        self.check()
        return ts + self._stepped

    def from_wall(self, ts: float) -> float:
        """A wall-clock time (written by another process) in this clock's frame, assuming it was
        written after the last step (the caller bounds what a time from before can cost)."""
        self.check()
        return ts - self._stepped

    def check(self) -> float:
        """Look at the wall clock: returns the size of a step since the last look (0.0 when none),
        logged once per step."""
        offset = self.offset()
        with self._lock:
            step = offset - self._offset
            self._offset = offset
            if abs(step) <= STEP_SECONDS:
                return 0.0
            self._stepped = offset
            self.steps_total += 1
            self.last_step_at, self.last_step = self.now(), step
        log.warning("the wall clock stepped %s by %.0f s (now %+.0f s from the daemon's clock, which counts "
                    "durations on the monotonic clock: alert lifetimes, holds, retries and heartbeat ages are "
                    "not moved by it)", "forward" if step > 0 else "back", abs(step), offset,
                    extra={"event": "clock_step"})
        return step

    def stepped_since(self, ts: float) -> bool:
        """Whether a step was seen at or after this clock's time `ts`."""
        return self.last_step_at is not None and self.last_step_at >= ts


CLOCK = SteadyClock()
now = CLOCK.now


def steady_stamp(raw: float, prev_raw: Optional[float], prev_steady: Optional[float], last_read: Optional[float],
                 at: float, clock: SteadyClock = CLOCK) -> float:
    """A wall-clock time another process wrote (a heartbeat's timestamp, a file's mtime), read at
    this clock's time `at`, in this clock's frame. The same raw value as at the last read keeps its
    earlier answer (it was judged before any later step). A new one was written after `last_read`,
    so it is no older than that (a forward step must not age it); when the wall clock stepped
    since, it is no newer than `at` either (one written before a backward step must not look
    an hour in the future). Without a step its offset from `at` is kept as written, so a writer
    whose clock runs ahead still shows as ahead."""
    if prev_raw is not None and prev_steady is not None and raw == prev_raw:
        return prev_steady
    ts = clock.from_wall(raw)
    if last_read is not None and prev_raw is not None:
        ts = max(ts, last_read)
    if clock.stepped_since(last_read if last_read is not None else -float("inf")):
        ts = min(ts, at)
    return ts

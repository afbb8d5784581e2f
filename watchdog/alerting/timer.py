"""The alert engine's timer: one thread that runs a pass when something can be due by time alone.

Between detector passes, alerts still change with time (a group window closes, a `for` or a
resolve delay ends, a reminder or a channel's re-push is due, a silence starts or ends). Each
pass computes the earliest such time; the thread sleeps until then, and at least every MAX_SLEEP
seconds. It used to poll every second, which cost CPU at idle for nothing. The arithmetic is
here, as functions of the times involved (no clock of their own); `EngineTimer` is only the thread.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Optional

log = logging.getLogger("watchdog.alerts")

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


@dataclass
class Schedule:
    """On the engine's clock: when the next pass can change something by time alone, when the
    last pass ran, until when the timer sleeps, and (while an alert fires: `watch_silences`) when
    the silences were last polled for a change."""

    due_at: float
    passed_at: float
    polled_at: float
    sleeping_until: float = float("inf")
    watch_silences: bool = False

    def pass_due(self, now: float) -> bool:
        """Something is due, or MAX_SLEEP passed (a clock set back counts as that too)."""
        return now >= self.due_at or not self.passed_at <= now < self.passed_at + MAX_SLEEP

    def poll_due(self, now: float) -> bool:
        """Time to look whether the silences changed (only while an alert fires)."""
        return self.watch_silences and not self.polled_at <= now < self.polled_at + SILENCE_POLL

    def next_wait(self, now: float, ran: bool) -> float:
        """How long the timer sleeps after a pass at `now` (`ran`: it ran the engine's pass)."""
        wait = min(self.due_at - now, self.passed_at + MAX_SLEEP - now)
        if self.watch_silences:
            wait = min(wait, self.polled_at + SILENCE_POLL - now)
        if ran and self.due_at <= now:
            wait = RETRY_SLEEP
        wait = max(wait, MIN_SLEEP)
        self.sleeping_until = now + wait
        return wait


class EngineTimer:
    """The thread: runs `step` (which returns how long to sleep) until closed; `wake` cuts the
    sleep short (the engine sets it when a detector pass makes something due sooner)."""

    def __init__(self, step: Callable[[], float]):
        self._step = step
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="alert-engine", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self._step()
            except Exception:
                log.exception("alert engine evaluation failed")
                wait = RETRY_SLEEP
            self.wake.wait(wait)
            self.wake.clear()

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

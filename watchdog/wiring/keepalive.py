"""The main loop's timers once the daemon is ready: the systemd watchdog ping (withheld while
probe rounds do not complete, so systemd restarts a wedged daemon), heap trim, the STATUS= line."""

from __future__ import annotations

import logging
from typing import Callable, Optional

from watchdog.service.malloc import TRIM_SECONDS, trim
from watchdog.service.sdnotify import Notifier

log = logging.getLogger("watchdog.daemon")

#: Seconds between STATUS= lines.
STATUS_SECONDS = 10


class KeepAlive:
    def __init__(self, notifier: Notifier, ping_every: Optional[float],
                 completing_rounds: Callable[[], bool], status_line: Callable[[], str]):
        self.notifier = notifier
        #: The systemd watchdog ping interval (None: no watchdog).
        self.ping_every = ping_every
        self._completing_rounds = completing_rounds
        self._status_line = status_line
        self.last_ping = 0.0
        self.last_status = 0.0
        self.last_trim = float("-inf")  # freed heap pages go back once ready, then every TRIM_SECONDS

    def wait(self, tick: float) -> float:
        """Main-loop pace once ready: the tick's period (the turn falls in the tick's wake-up),
        shorter only for the systemd watchdog ping (READY and signals wake it at once)."""
        return min(tick, self.ping_every / 2) if self.ping_every else tick

    def turn(self, now: float) -> None:
        if self.ping_every and now - self.last_ping >= self.ping_every:
            if self._completing_rounds():
                self.notifier.watchdog()
            else:
                log.error("probe rounds are not completing; withholding the systemd watchdog ping")
            self.last_ping = now
        if now - self.last_trim >= TRIM_SECONDS:
            trim()
            self.last_trim = now
        if self.notifier.enabled and now - self.last_status >= STATUS_SECONDS:
            self.notifier.status(self._status_line())
            self.last_status = now

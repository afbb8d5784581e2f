"""The systemd notify protocol, spoken directly (one datagram per message, UTF-8).

Not the `sdnotify` package: it encodes Latin-1 and silently drops any message with other
characters, which would lose READY=1 or WATCHDOG=1 together with a Chinese STATUS= line.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Optional

log = logging.getLogger("watchdog.sdnotify")  # its name in the journal, kept across the move into a folder


class Notifier:
    """Sends notify messages if NOTIFY_SOCKET is set; otherwise every call is a cheap no-op."""

    def __init__(self, address: Optional[str] = None):
        addr = os.environ.get("NOTIFY_SOCKET", "") if address is None else address
        if addr.startswith("@"):
            self._addr: Optional[str] = "\0" + addr[1:]
        elif addr.startswith("/"):
            self._addr = addr
        else:
            if addr:
                log.warning("NOTIFY_SOCKET %r is not a unix socket address; systemd notify disabled", addr)
            self._addr = None

    @property
    def enabled(self) -> bool:
        return self._addr is not None

    def send(self, *assignments: str) -> bool:
        if self._addr is None:
            return False
        payload = "\n".join(a.replace("\n", " ") if not a.startswith("STATUS=") else a.replace("\n", " ")
                            for a in assignments)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto(payload.encode("utf-8"), self._addr)
            return True
        except OSError as exc:
            log.debug("sd_notify failed: %s", exc)
            return False

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *( [f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def reloading(self) -> bool:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")


def watchdog_interval() -> Optional[float]:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None if not requested of us."""
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = os.environ.get("WATCHDOG_PID")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    try:
        value = int(usec)
    except ValueError:
        log.warning("WATCHDOG_USEC=%r is not an integer; watchdog pings disabled", usec)
        return None
    return value / 2 / 1e6 if value > 0 else None

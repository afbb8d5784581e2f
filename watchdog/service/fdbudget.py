"""File descriptors: the daemon's own budget, so that no client can starve the probes.

systemd's default soft limit is 1024. Every HTTP connection costs a descriptor; so does every
followed log file, every npu-smi pipe, the SQLite files and each snapshot being written. An
unbounded HTTP server let ~1,100 idle connections take them all: `/healthz` timed out and the log
probe and the alert engine failed with EMFILE. So:
- at start the soft limit is raised to the hard limit (the unit sets `LimitNOFILE=` too);
- `PROBE_RESERVE` descriptors are never given to HTTP connections: the connection cap is the
  configured `http.max_connections`, lowered if the limit minus what is open minus the reserve
  is smaller (never below `MIN_CONNECTIONS`).
"""

from __future__ import annotations

import logging
import os
from typing import Tuple

log = logging.getLogger("watchdog.fdbudget")  # its name in the journal, kept across the move into a folder

#: Descriptors kept for probes, the alert store, senders and snapshots whatever HTTP clients do.
PROBE_RESERVE = 256
#: Fewest HTTP connections allowed even under a tiny limit (scrape + health check + a spare).
MIN_CONNECTIONS = 4
#: Do not raise the soft limit beyond this (select()-free code, but keep the footprint plain).
SOFT_CEILING = 65536

try:
    import resource
except ImportError:  # pragma: no cover - not on Linux
    resource = None  # type: ignore[assignment]


def nofile_limits() -> Tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE; (-1, -1) where unknown."""
    if resource is None:
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return int(soft), int(hard)


def raise_soft_limit() -> int:
    """Raise the soft descriptor limit towards the hard one; returns the soft limit in force."""
    soft, hard = nofile_limits()
    if resource is None or soft < 0:
        return soft
    want = SOFT_CEILING if hard == resource.RLIM_INFINITY else min(hard, SOFT_CEILING)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, want, exc)
    return soft


#: Fewest log files kept open whatever the limit (the rest are read by polling).
MIN_LOG_FILES = 16


def log_file_budget() -> int:
    """How many followed log files may keep their descriptor open between rounds: half of the
    open-files limit left after `PROBE_RESERVE` (the other half is the HTTP connections' and
    the rest's). A plog folder can hold 10,000 files: beyond the budget a file is read by
    polling (opened, read and closed each round), so the alert store, the HTTP server and
    npu-smi's pipes always find a descriptor."""
    soft, _ = nofile_limits()
    if soft < 0 or (resource is not None and soft == resource.RLIM_INFINITY):
        return 1 << 30
    return max(MIN_LOG_FILES, (soft - PROBE_RESERVE) // 2)


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def connection_cap(configured: int, soft: int, in_use: int) -> int:
    """How many HTTP connections may be open at once, keeping `PROBE_RESERVE` for the rest."""
    if soft < 0:
        return configured
    room = soft - in_use - PROBE_RESERVE
    return max(MIN_CONNECTIONS, min(configured, room))

"""Retention of snapshot archives (count, total bytes, age; oldest first) and the free-space floor.

Only files that look like our own finished archives are ever deleted; temporary files of captures
that died half-way are cleaned once they are clearly stale.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from typing import List, Optional

log = logging.getLogger("watchdog.snapshots")

#: `<UTC time>-<host>-<rule>[-n].tar.gz` as written by the taker.
ARCHIVE_RE = re.compile(r"^\d{8}T\d{6}Z-.+\.tar\.gz$")
PARTIAL_SUFFIX = ".partial"
STALE_PARTIAL_SECONDS = 3600.0


@dataclass(frozen=True)
class Archive:
    path: str
    size: int
    mtime: float


def list_archives(directory: str) -> List[Archive]:
    """Our finished archives in `directory`, oldest first."""
    out: List[Archive] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for name in names:
        if not ARCHIVE_RE.match(name):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append(Archive(path, st.st_size, st.st_mtime))
    out.sort(key=lambda a: (a.mtime, a.path))
    return out


def disk_bytes(directory: str) -> int:
    return sum(a.size for a in list_archives(directory))


def plan_deletions(archives: List[Archive], keep: int, max_bytes: int, max_age: float,
                   now: float, protect: Optional[str] = None) -> List[Archive]:
    """Which archives to delete (pure): too old, then oldest while over count or bytes.

    `protect` (the archive just written) is never deleted, even if it alone exceeds `max_bytes`:
    the newest evidence is the most valuable.
    """
    remaining = sorted(archives, key=lambda a: (a.mtime, a.path))
    doomed: List[Archive] = []
    for a in list(remaining):
        if a.path != protect and now - a.mtime > max_age:
            doomed.append(a)
            remaining.remove(a)
    total = sum(a.size for a in remaining)
    for a in list(remaining):
        if len(remaining) <= keep and total <= max_bytes:
            break
        if a.path == protect:
            continue
        doomed.append(a)
        remaining.remove(a)
        total -= a.size
    return doomed


def apply_retention(directory: str, keep: int, max_bytes: int, max_age: float,
                    protect: Optional[str] = None, now: Optional[float] = None) -> List[str]:
    """Delete what `plan_deletions` says; returns the deleted paths."""
    now = time.time() if now is None else now
    deleted = []
    for a in plan_deletions(list_archives(directory), keep, max_bytes, max_age, now, protect):
        try:
            os.unlink(a.path)
            deleted.append(a.path)
            log.info("snapshot retention: deleted %s (%d bytes)", os.path.basename(a.path), a.size)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("snapshot retention: cannot delete %s: %s", a.path, exc.strerror or exc)
    _clean_partials(directory, now)
    return deleted


def _clean_partials(directory: str, now: float) -> None:
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.startswith(".") and name.endswith(PARTIAL_SUFFIX)):
            continue
        path = os.path.join(directory, name)
        try:
            if now - os.stat(path).st_mtime > STALE_PARTIAL_SECONDS:
                os.unlink(path)
        except OSError:
            pass


def free_bytes(directory: str) -> int:
    """Bytes available to the daemon on the filesystem holding `directory`."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize

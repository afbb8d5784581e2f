"""Change events for followed log files: Linux inotify through ctypes (no extra package).

The log probe used to poll every few seconds: a glob, a stat per file and a state save per
round even when nothing was written. With events an idle log costs nothing, and a new line is
read within a fraction of a second of its write. Directories are watched (not files), so
rotation (rename + create), delete + re-create and new plog files are seen as well.

Where inotify is missing (not Linux, no libc symbol, watch limit reached) `DirWatch.open` says
why and returns None; the probe then keeps polling at its configured interval.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
import sys
from typing import Dict, Optional, Set, Tuple

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

#: What a followed directory reports: writes, truncation, rotation, creation and removal.
DIR_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
            | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len

#: Path reported when events were lost (queue overflow): everything must be looked at.
EVERYTHING = "*"


def _libc() -> Optional[ctypes.CDLL]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch  # noqa: B018 - presence
    except (OSError, AttributeError):
        return None
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


def parse_events(buf: bytes) -> Tuple[Tuple[int, int, str], ...]:
    """(wd, mask, name) of each event in a read() buffer; a truncated tail is ignored."""
    out = []
    pos, n = 0, len(buf)
    while pos + _HEADER.size <= n:
        wd, mask, _cookie, length = _HEADER.unpack_from(buf, pos)
        pos += _HEADER.size
        raw = buf[pos:pos + length]
        pos += length
        out.append((wd, mask, os.fsdecode(raw.split(b"\0", 1)[0])))
    return tuple(out)


class DirWatch:
    """One inotify instance watching a set of directories."""

    def __init__(self, libc: ctypes.CDLL, fd: int):
        self._libc = libc
        self.fd = fd
        self._wd: Dict[str, int] = {}
        self._path: Dict[int, str] = {}
        #: Why a directory could not be watched (shown once in the log).
        self.errors: Dict[str, str] = {}

    @classmethod
    def open(cls) -> Optional["DirWatch"]:
        libc = _libc()
        if libc is None:
            log.info("inotify is not available here; log files are polled")
            return None
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            log.warning("inotify_init1 failed (%s); log files are polled", os.strerror(err))
            return None
        return cls(libc, fd)

    def sync(self, dirs: Set[str]) -> None:
        """Watch exactly these directories (adding and removing watches as needed)."""
        for d in list(self._wd):
            if d not in dirs:
                wd = self._wd.pop(d)
                self._path.pop(wd, None)
                self._libc.inotify_rm_watch(self.fd, wd)
        for d in dirs:
            if d in self._wd:
                continue
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(d), DIR_MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err != errno.ENOENT and self.errors.get(d) is None:
                    log.warning("cannot watch %s for changes (%s); it is polled", d, os.strerror(err))
                self.errors[d] = os.strerror(err)
                continue
            self.errors.pop(d, None)
            self._wd[d] = wd
            self._path[wd] = d

    @property
    def complete(self) -> bool:
        """False while some wanted directory could not be watched (polling must cover it)."""
        return not self.errors

    def wait(self, timeout: float) -> Optional[Set[str]]:
        """Paths that changed (EVERYTHING after lost events), or None if none did in `timeout`."""
        try:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        except (OSError, ValueError):
            return None
        if not ready:
            return None
        changed: Set[str] = set()
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                changed.add(EVERYTHING)
                break
            if not buf:
                break
            for wd, mask, name in parse_events(buf):
                if mask & IN_Q_OVERFLOW:
                    changed.add(EVERYTHING)
                    continue
                base = self._path.get(wd)
                if mask & IN_IGNORED:
                    if base is not None:  # the directory itself went away
                        self._path.pop(wd, None)
                        self._wd.pop(base, None)
                        changed.add(EVERYTHING)
                    continue
                if base is not None:
                    changed.add(os.path.join(base, name) if name else base)
        return changed or None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

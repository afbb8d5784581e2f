"""Opening the files of ranks: heartbeats, flight recorder rings, logs, plogs, snapshot sources.

The daemon runs as root and reads files whose names other users choose (a rank's environment
names its heartbeat file; its open files name its logs). One helper opens all of them, so a user
cannot make the daemon read, show or copy a file it could not read itself, nor hang it:

- no symbolic link is followed at the last component (`O_NOFOLLOW`); a link swapped in for a
  heartbeat file is refused, never read through;
- a link higher up the path (a folder swapped for a link) is caught by the owner check: the
  opened file's owner (`fstat` of the descriptor, so what is checked is what is read) must be the
  rank's user when it is known (`uid`; root's ranks may read anything root owns);
- only regular files: a FIFO, a device or a socket is refused before any read, and the open
  itself never blocks (`O_NONBLOCK`, cleared once the file is known to be regular);
- `check_fd` repeats the owner and type check on a descriptor kept open, at every read.

A refusal is a `RankFileRefused` (an OSError, so every reader's existing "cannot read" path
reports it: a finding and a log line naming the file and why), never content.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from typing import BinaryIO, Iterator, Optional

#: Why a file was refused (`RankFileRefused.reason`; also the snapshot manifest's reason).
SYMLINK = "symlink"
NOT_REGULAR = "not_regular_file"
WRONG_OWNER = "wrong_owner"

_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
          | getattr(os, "O_NOCTTY", 0))


class RankFileRefused(OSError):
    """A rank's file the daemon will not read: `reason` is SYMLINK, NOT_REGULAR or WRONG_OWNER,
    `strerror` says it in words."""

    def __init__(self, path: str, reason: str, detail: str):
        super().__init__(errno.EPERM, f"refused: {detail}", path)
        self.reason = reason


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check_stat(path: str, st: os.stat_result, uid: Optional[int]) -> None:
    """Raise RankFileRefused unless `st` is a regular file owned by `uid` (any owner when `uid` is
    None, e.g. a path from the config, or 0: a root rank)."""
    if not stat.S_ISREG(st.st_mode):
        raise RankFileRefused(path, SYMLINK if stat.S_ISLNK(st.st_mode) else NOT_REGULAR,
                              f"{_kind(st.st_mode)}, not a regular file")
    if uid is not None and uid != 0 and st.st_uid != uid:
        raise RankFileRefused(path, WRONG_OWNER, f"owned by uid {st.st_uid}, not by the rank's user (uid {uid})")


def check_fd(fd: int, path: str, uid: Optional[int]) -> os.stat_result:
    """`fstat` of an open rank file, checked again (type and owner); returns it."""
    st = os.fstat(fd)
    check_stat(path, st, uid)
    return st


def open_rank_file(path: str, uid: Optional[int] = None) -> int:
    """A read-only descriptor of a rank's file (see the module docstring); the caller closes it.
    Raises RankFileRefused, or OSError (FileNotFoundError when it does not exist)."""
    try:
        pre = os.lstat(path)
    except OSError:
        pre = None  # let open() say why (not there, permission)
    if pre is not None:
        check_stat(path, pre, None)  # a link or a FIFO is refused without even opening it
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a link between the lstat and the open
            raise RankFileRefused(path, SYMLINK, "a symbolic link, not a regular file") from None
        raise
    try:
        check_fd(fd, path, uid)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def rank_file(path: str, uid: Optional[int] = None) -> Iterator[BinaryIO]:
    """`open_rank_file` as a binary file object (closed on exit)."""
    with os.fdopen(open_rank_file(path, uid), "rb") as fh:
        yield fh


#: A file's last write must be this much older than a job's start to be taken for an earlier
#: run's (an NFS server's clock may lag the node's; a relaunch within seconds is still read).
BEFORE_START_MARGIN = 60.0


def earlier_run_ends(path: str, started_at: Optional[float]) -> int:
    """Where the lines of a job that started at `started_at` can begin in the log file at `path`:
    its size now when it was last written well before the job started (a relaunch appending to
    an earlier run's file: what is there is that run's), else 0. Not opened, only stat'ed."""
    if not started_at:
        return 0
    try:
        st = os.stat(path)
    except OSError:
        return 0
    if stat.S_ISREG(st.st_mode) and st.st_size and st.st_mtime < started_at - BEFORE_START_MARGIN:
        return st.st_size
    return 0


def still_from(path: str, dev: int, ino: int, size: int) -> int:
    """`size` when the file at `path` is still the one noted (device, inode) and not shorter than
    it was (appended to, not rewritten); else 0. Only stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return size if (st.st_dev, st.st_ino) == (dev, ino) and st.st_size >= size else 0

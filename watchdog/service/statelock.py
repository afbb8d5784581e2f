"""One daemon per state folder: an exclusive lock on the folder itself and on
`<state_dir>/daemon.lock`.

Two daemons on one folder would both send every alert, overwrite each other's log offsets and
fight over the alerting database. flock (not a pid file) because the kernel drops it when its
holder dies, even by SIGKILL: a stale lock file can never block a restart. The file holds the
holder's pid only so the refusal can name it. The lock on the folder's own inode holds when
someone deletes the lock file (`rm state/daemon.lock` let a second daemon start beside the first
and both paged); a folder deleted whole is a new folder, which the running daemon re-creates and
locks again (watchdog.wiring.startup.StateFolder.check).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import Optional

from watchdog.service import statefiles

LOCK_NAME = "daemon.lock"


class StateFolderBusy(Exception):
    """Another live process holds the lock; the message names its pid and the folder."""

    def __init__(self, state_dir: str, pid: str):
        self.pid = pid
        super().__init__(f"another npu-watchdog (pid {pid}) is already using the state folder {state_dir}; "
                         "stop it first, or give this one its own folder (paths.state_dir or --state-dir)")


def acquire(state_dir: str) -> int:
    """Take the folder's lock and write our pid into it; the returned descriptor must stay open
    for the daemon's lifetime (closing it releases the lock)."""
    path = os.path.join(state_dir, LOCK_NAME)
    cloexec = getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK  # a FIFO there must not block the open
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | cloexec, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device put there: damage, set aside
            os.close(fd)
            statefiles.quarantine(path, "not a regular file")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | cloexec, 0o600)
        writable = True
    except OSError as exc:
        # A read-only state folder (a filesystem remounted read-only): flock needs no write
        # access, so an existing lock file still keeps a second daemon out; the pid stays unsaid.
        if exc.errno != errno.EROFS or not os.path.isfile(path):
            raise
        fd = os.open(path, os.O_RDONLY | cloexec)
        writable = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StateFolderBusy(state_dir, holder) from None
        raise
    if writable:
        try:
            os.fchmod(fd, 0o600)  # a lock file left 0666 (an old umask, another tool) is tightened
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError:  # a full disk: the lock holds all the same, only the pid stays unsaid
            pass
    return fd


def lock_dir(state_dir: str) -> Optional[int]:
    """Take the lock on the folder's own inode; the descriptor must stay open for the daemon's
    lifetime. Raises StateFolderBusy when another process holds it. None where a folder cannot be
    locked (flock on a directory is refused by some network filesystems): the lock file alone
    keeps a second daemon out there."""
    cloexec = getattr(os, "O_CLOEXEC", 0)
    fd = os.open(state_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | cloexec)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StateFolderBusy(state_dir, _holder(state_dir)) from None
        return None
    return fd


def _holder(state_dir: str) -> str:
    """The pid the lock file names ("unknown" when it is gone or unreadable)."""
    try:
        fd = os.open(os.path.join(state_dir, LOCK_NAME), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return "unknown"
    try:  # not a regular file (a FIFO would block the read): no pid to say
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "unknown"
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
    except OSError:
        return "unknown"
    finally:
        os.close(fd)


def same_dir(fd: Optional[int], state_dir: str) -> bool:
    """Whether `fd` (from `lock_dir`) is still the folder at `state_dir` (false once it was
    deleted or replaced)."""
    return fd is not None and _is(fd, state_dir)


def held(fd: int, state_dir: str) -> bool:
    """Whether `fd` is still the lock file of `state_dir`: false once the file or the whole folder
    was deleted (or replaced) under the daemon, when a second daemon could take a new lock there."""
    return _is(fd, os.path.join(state_dir, LOCK_NAME))


def _is(fd: int, path: str) -> bool:
    """Whether `path` names the file open as `fd` (same device and inode)."""
    try:
        here, ours = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino)

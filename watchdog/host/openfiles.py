"""Which processes hold a file open for writing: open-file evidence from `/proc/<pid>/fd`.

The log tailer asks two questions no file metadata answers:
- is a rotated-away or deleted log still written to? (`python train.py > train.log` keeps its
  descriptor when logrotate renames the file; quiet for minutes during an eval, it writes again);
- did a process start writing a log from its beginning after the daemon last read it? (a job
  relaunched with `> train.log` while the daemon was down: the same inode, the same banner).

Only names and descriptor metadata are read (`readlink` of the descriptor, its `fdinfo`), never
the file through another process's descriptor, so a file on a hung network filesystem cannot
block the scan. Another user's process that cannot be inspected is skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from watchdog.host.procstat import PROC, read_stat

#: open(2) flags as fdinfo shows them (octal).
O_ACCMODE = 0o3
O_RDONLY = 0o0
O_APPEND = 0o2000

#: (mount id, inode) of a descriptor, as fdinfo gives them (Linux 5.14+ has `ino:`).
Ident = Tuple[int, int]


@dataclass(frozen=True)
class Writer:
    """A process holding a file open for writing."""

    pid: int
    #: Epoch seconds the process started.
    started_at: float
    #: Opened with O_APPEND (`>>`): it never rewrites what is there.
    appends: bool
    #: The file's (mount id, inode), when the kernel says (None: older kernels).
    ident: Optional[Ident] = None


def fd_ident(fd_dir: str, fd: str) -> Tuple[Optional[int], Optional[Ident]]:
    """(flags, (mount id, inode)) of one descriptor from its fdinfo; None where not shown."""
    flags: Optional[int] = None
    mnt: Optional[int] = None
    ino: Optional[int] = None
    try:
        with open(os.path.join(os.path.dirname(fd_dir), "fdinfo", fd), "rb") as fh:
            text = fh.read(4096)
    except OSError:
        return None, None
    for line in text.splitlines():
        key, _, value = line.partition(b":")
        try:
            if key == b"flags":
                flags = int(value.strip(), 8)
            elif key == b"mnt_id":
                mnt = int(value.strip())
            elif key == b"ino":
                ino = int(value.strip())
        except ValueError:
            continue
    return flags, (mnt, ino) if mnt is not None and ino is not None else None


def own_link(fd: int, proc: str = PROC) -> Tuple[Optional[str], Optional[Ident]]:
    """What the daemon's own descriptor `fd` names (`/path`, or `/path (deleted)`) and its ident."""
    try:
        link = os.readlink(f"{proc}/self/fd/{fd}")
    except OSError:
        return None, None
    return link, fd_ident(f"{proc}/self/fd", str(fd))[1]


def _processes(proc: str, keep: Callable[[int, int], bool]) -> Iterator[int]:
    """Pids under `proc` (not the daemon's own) whose owner uid passes `keep(pid, uid)`."""
    me = os.getpid()
    try:
        entries = list(os.scandir(proc))
    except OSError:
        return
    for entry in entries:
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            uid = entry.stat(follow_symlinks=False).st_uid
        except OSError:
            continue
        if keep(pid, uid):
            yield pid


def writers(links: Dict[str, Optional[Ident]], uids: Optional[set] = None,
            started_after: Optional[float] = None, proc: str = PROC) -> Dict[str, List[Writer]]:
    """The processes writing each of `links` (descriptor link texts, with the ident when known).

    `uids`: only processes of these users (None: every user); `started_after`: only processes
    that started after this epoch time (the relaunch question: few processes, a cheap scan). A
    descriptor matches when its link text is the same and, where both are known, its ident."""
    out: Dict[str, List[Writer]] = {}
    if not links:
        return out
    for pid in _processes(proc, lambda p, u: uids is None or u in uids):
        started: Optional[float] = None
        if started_after is not None:
            started = _started(pid, proc)
            if started is None or started <= started_after:
                continue
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if link not in links:
                continue
            flags, ident = fd_ident(fd_dir, fd)
            if flags is None or flags & O_ACCMODE == O_RDONLY:
                continue
            want = links[link]
            if want is not None and ident is not None and ident != want:
                continue
            if started is None:
                started = _started(pid, proc)
            if started is None:
                continue
            out.setdefault(link, []).append(Writer(pid, started, bool(flags & O_APPEND), ident))
    return out


def _started(pid: int, proc: str) -> Optional[float]:
    try:
        return read_stat(pid, proc).create_time
    except (OSError, ValueError, RuntimeError):
        return None

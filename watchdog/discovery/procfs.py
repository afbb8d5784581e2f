"""Reading processes from procfs: cheap (a few small reads each), never through a shell.

Everything here tolerates processes vanishing mid-read and other users' processes whose
environment cannot be read; those are reported as `env=None`, never as an error.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import replace
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple

from watchdog.discovery.environ import parse_environ
from watchdog.discovery.model import ProcRecord

PROC = "/proc"
#: Bytes of a command line kept (enough for a launcher and its script).
MAX_CMDLINE = 8192
#: File-name endings of log files a rank holds open for writing.
LOG_SUFFIXES = (".log", ".out", ".err", ".txt")


def _read(path: str, limit: int = 1 << 20) -> bytes:
    with open(path, "rb", buffering=0) as fh:
        return fh.read(limit)


def parse_stat(text: str) -> Tuple[str, int, int]:
    """(comm, ppid, start ticks) from /proc/<pid>/stat; comm may hold spaces and parentheses."""
    lpar, rpar = text.index("("), text.rindex(")")
    fields = text[rpar + 2:].split()
    return text[lpar + 1:rpar], int(fields[1]), int(fields[19])


def _stat_of(pid: int, proc: str) -> Tuple[str, str, int, int, int]:
    """(comm, state, ppid, start ticks, owner uid) of a process: one open, read and fstat (the
    files of /proc/<pid> belong to the process's user, as the folder does)."""
    fd = os.open(f"{proc}/{pid}/stat", os.O_RDONLY)
    try:
        text = os.read(fd, 4096).decode("utf-8", "replace")
        uid = os.fstat(fd).st_uid
    finally:
        os.close(fd)
    comm, ppid, start = parse_stat(text)
    return comm, text[text.rindex(")") + 2:].split(None, 1)[0], ppid, start, uid


def list_pids(proc: str = PROC) -> List[int]:
    return [int(n) for n in os.listdir(proc) if n.isdigit()]


def read_record(pid: int, keys: FrozenSet[str], proc: str = PROC) -> Optional[ProcRecord]:
    """One process, or None when it is gone or is a kernel thread (no command line)."""
    base = f"{proc}/{pid}"
    try:
        comm, ppid, start = parse_stat(_read(base + "/stat", 4096).decode("utf-8", "replace"))
        raw_cmd = _read(base + "/cmdline", MAX_CMDLINE)
        uid = os.stat(base).st_uid
    except (OSError, ValueError, IndexError):
        return None
    if not raw_cmd:
        return None  # kernel thread or zombie: no rank is discovered from it
    cmdline = tuple(a.decode("utf-8", "replace") for a in raw_cmd.rstrip(b"\0").split(b"\0"))
    try:
        env: Optional[Dict[str, str]] = parse_environ(_read(base + "/environ"), keys)
    except OSError:
        env = None
    return ProcRecord(pid=pid, ppid=ppid, uid=uid, start_ticks=start, name=comm, cmdline=cmdline, env=env)


def read_all(keys: FrozenSet[str], proc: str = PROC) -> Dict[int, ProcRecord]:
    out: Dict[int, ProcRecord] = {}
    for pid in list_pids(proc):
        rec = read_record(pid, keys, proc)
        if rec is not None:
            out[pid] = rec
    return out


#: A process read younger than this is read again at the next scan: a launcher's child between
#: its fork and its exec still shows the launcher's command line and environment (and the same
#: command name when both are python).
SETTLED_SECONDS = 2.0
#: Every this many scans each process is read afresh: a program that execs long after it started,
#: under the same command name, is then seen within that many scans (5 min at the defaults).
FULL_EVERY = 30


class ProcTable:
    """`read_all` that remembers: a process seen before (same pid, start time, command name and
    owner), read when it was past its fork-to-exec moment, keeps its record, so a scan reads one
    small `stat` per process and the command line and environment only of processes that are new
    (or young, or exec'd to another program), and of all of them every `full_every` scans. Why:
    discovery scans every process-probe round, and reading every process's environment was most
    of the daemon's CPU on a node of a few hundred processes. Safe to share between threads."""

    def __init__(self, settled: float = SETTLED_SECONDS, full_every: int = FULL_EVERY) -> None:
        self._lock = threading.Lock()
        self.settled, self.full_every = settled, full_every
        self._keys: FrozenSet[str] = frozenset()
        #: pid -> ((start ticks, comm, uid), record or None (kernel thread, no command line),
        #: whether it was read past SETTLED_SECONDS of age)
        self._known: Dict[int, _Known] = {}
        #: Scans made (every full_every-th reads every process).
        self.scans = 0
        #: Processes whose command line and environment were read (all scans): what a scan costs.
        self.records_read = 0

    def read(self, keys: FrozenSet[str], proc: str = PROC) -> Dict[int, ProcRecord]:
        with self._lock:
            if keys != self._keys:
                self._keys, self._known = keys, {}
            self.scans += 1
            full = self.full_every > 0 and self.scans % self.full_every == 0
            now_ticks = _uptime(proc) * CLOCK_TICKS
            known: Dict[int, _Known] = {}
            out: Dict[int, ProcRecord] = {}
            for pid in list_pids(proc):
                try:
                    comm, state, ppid, start, uid = _stat_of(pid, proc)
                except (OSError, ValueError, IndexError):
                    continue
                ident = (start, comm, uid)
                prev = self._known.get(pid)
                if prev is not None and prev[0] == ident and prev[2] and not full:
                    rec, settled = prev[1], True
                    if rec is not None and rec.ppid != ppid:  # re-parented (its parent exited)
                        rec = replace(rec, ppid=ppid)
                else:
                    settled = now_ticks - start >= self.settled * CLOCK_TICKS
                    rec = read_record(pid, keys, proc)
                    self.records_read += 1
                known[pid] = (ident, rec, settled)
                if rec is not None and state != "Z":
                    out[pid] = rec
            self._known = known
            return out


_Known = Tuple[Tuple[int, str, int], Optional[ProcRecord], bool]


def _uptime(proc: str) -> float:
    """Seconds since boot (the clock of the start times in /proc/<pid>/stat)."""
    try:
        return float(_read(f"{proc}/uptime", 256).split()[0])
    except (OSError, ValueError, IndexError):
        return float("inf")  # unknown: every process counts as settled


def _regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _open_flags(pid: int, fd: str, proc: str) -> int:
    for line in _read(f"{proc}/{pid}/fdinfo/{fd}", 4096).decode("ascii", "replace").splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8)
    return 0


def rank_logs(pid: int, proc: str = PROC) -> Tuple[str, ...]:
    """The rank's stdout/stderr when they are regular files, then log files it holds open to write."""
    found: List[str] = []
    for fd in ("1", "2"):
        try:
            target = os.readlink(f"{proc}/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and target not in found and _regular_file(target):
            found.append(target)
    for fd, target in _fd_targets(pid, proc):
        if fd in ("0", "1", "2") or target in found or not target.endswith(LOG_SUFFIXES):
            continue
        try:
            writable = _open_flags(pid, fd, proc) & (os.O_WRONLY | os.O_RDWR)
        except (OSError, ValueError, IndexError):
            continue
        if writable and _regular_file(target):
            found.append(target)
    return tuple(found)


def _fd_targets(pid: int, proc: str) -> Iterator[Tuple[str, str]]:
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")
    except OSError:
        return
    for fd in sorted(fds, key=lambda s: int(s) if s.isdigit() else 0)[:4096]:
        try:
            target = os.readlink(f"{proc}/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.startswith(("/dev/", "/proc/", "/sys/")):
            yield fd, target


def boot_time(proc: str = PROC) -> float:
    try:
        for line in _read(f"{proc}/stat").decode("ascii", "replace").splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0.0


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

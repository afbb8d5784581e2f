"""Reading processes from procfs: cheap (a few small reads each), never through a shell.

Everything here tolerates processes vanishing mid-read and other users' processes whose
environment cannot be read; those are reported as `env=None`, never as an error.
"""

from __future__ import annotations

import math
import os
import stat
import threading
from dataclasses import replace
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

from watchdog.host import procstat
from watchdog.discovery.environ import parse_environ, rank_of
from watchdog.discovery.model import ProcRecord

PROC = "/proc"
#: Bytes of a command line kept (enough for a launcher and its script).
MAX_CMDLINE = 8192
#: File-name endings of log files a rank holds open for writing.
LOG_SUFFIXES = (".log", ".out", ".err", ".txt")


#: Bytes of an environment read: all of it (Linux allows arguments and environment together a
#: quarter of the stack limit, 2 MiB by default); torchrun appends RANK and LOCAL_RANK after the
#: environment it copies, so a rank with a large one cut at 1 MiB was no rank. Read once per new
#: process; only the whitelisted keys are kept.
MAX_ENVIRON = 1 << 22


def _read(path: str, limit: int = MAX_ENVIRON) -> bytes:
    with open(path, "rb", buffering=0) as fh:
        return fh.read(limit)


def _stat_of(pid: int, proc: str) -> Tuple[str, str, int, int, int]:
    """(comm, state, ppid, start ticks, owner uid) of a process: one open, read and fstat (the
    files of /proc/<pid> belong to the process's user, as the folder does). The state is
    psutil's name for it (`zombie`, ...), as the process probe's (watchdog.host.procstat)."""
    fd = os.open(f"{proc}/{pid}/stat", os.O_RDONLY)
    try:
        raw = os.read(fd, procstat.STAT_BYTES)
        uid = os.fstat(fd).st_uid
    finally:
        os.close(fd)
    st = procstat.parse_stat(raw, boot=0.0)  # (the start time is kept in ticks here)
    return st.comm, st.state, st.ppid, st.start_ticks, uid


def list_pids(proc: str = PROC) -> List[int]:
    return [int(n) for n in os.listdir(proc) if n.isascii() and n.isdigit()]


def read_record(pid: int, keys: FrozenSet[str], proc: str = PROC) -> Optional[ProcRecord]:
    """One process, or None when it is gone or is a kernel thread (no command line)."""
    base = f"{proc}/{pid}"
    try:
        st = procstat.parse_stat(_read(base + "/stat", procstat.STAT_BYTES), boot=0.0)
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
    return ProcRecord(pid=pid, ppid=st.ppid, uid=uid, start_ticks=st.start_ticks, name=st.comm, cmdline=cmdline,
                      env=env)


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
#: A settled process that is not an ancestor of a rank (ranks included) has its `stat` checked
#: once every this many scans (a share of them each scan): one that execs into a rank under a
#: new command name, or a rank that exits, execs or turns zombie, is seen within that many scans
#: (30 s at the defaults; the process probe follows each rank every round on its own).
ROTATE_EVERY = 3


def _proc_entries(proc: str) -> List[Tuple[int, int]]:
    """(pid, inode of /proc/<pid>) from one directory read (the inode comes with the entry: no
    stat). A pid whose inode is unchanged is the same process: procfs gives each process's
    folder its own inode, so a pid taken over by a new process shows a new one."""
    with os.scandir(proc) as it:
        return [(int(e.name), e.inode()) for e in it if e.name.isascii() and e.name.isdigit()]


class ProcTable:
    """`read_all` that remembers, so a scan costs one directory read plus a `stat` of the
    processes that matter. Why: discovery scans every process-probe round, and reading every
    process's environment, then every process's `stat`, was most of the daemon's idle CPU (a
    large node has hundreds of kernel threads and daemons, none of them ever a rank).

    - A new pid (or a pid whose /proc inode changed: a new process) has its `stat`, command line
      and environment read.
    - The ancestors of rank-marked processes (launchers, wrappers) and processes read young
      (between fork and exec) have their `stat` read every scan: an exec (new command name), a
      new parent or an exit is seen at once, and their command line and environment are read
      again when their identity (start time, command name, owner) changed.
    - Other user processes, the ranks among them (the process probe reads each rank every round
      anyway), have their `stat` checked in turn, a third of them each scan (`rotate`); kernel
      threads and zombies (no command line) only when their inode changes.
    - Every `full_every` scans every process is read afresh (an exec under the same command name).

    Safe to share between threads."""

    def __init__(self, settled: float = SETTLED_SECONDS, full_every: int = FULL_EVERY,
                 rotate: int = ROTATE_EVERY) -> None:
        self._lock = threading.Lock()
        self.settled, self.full_every, self.rotate = settled, full_every, max(1, rotate)
        self._keys: FrozenSet[str] = frozenset()
        #: pid -> (identity, record or None (kernel thread, zombie), read settled, /proc inode, state,
        #: carries a rank marker)
        self._known: Dict[int, _Known] = {}
        #: Pids whose `stat` is read every scan (the ancestors of rank-marked processes).
        self._watched: FrozenSet[int] = frozenset()
        #: Scans made (every full_every-th reads every process).
        self.scans = 0
        #: Processes of the last scan whose `stat` could not be parsed (left out, counted).
        self.unparsable = 0
        #: `stat` files read (all scans).
        self.stats_read = 0
        #: pid -> (identity, scan, log files): a rank's open files are listed again every
        #: `rotate` scans (a real rank holds hundreds of descriptors: sockets, devices, shm).
        self._logs: Dict[int, Tuple[Tuple[int, str, int], int, Tuple[str, ...]]] = {}
        #: Bumped by a scan in which a process a job is made of (a rank-marked process or an
        #: ancestor of one) came, went or changed: what the jobs found depend on, so a caller may
        #: key work done on the records by it. Other processes coming and going do not bump it.
        self.generation = 0
        self._marked: FrozenSet[int] = frozenset()
        #: For the caller: (key, value) of work done on one generation's records.
        self.memo: Optional[Tuple[object, object]] = None

    def read(self, keys: FrozenSet[str], proc: str = PROC) -> Dict[int, ProcRecord]:
        with self._lock:
            if keys != self._keys:
                self._keys, self._known = keys, {}
            self.scans += 1
            full = self.full_every > 0 and self.scans % self.full_every == 0
            turn = self.scans % self.rotate
            now_ticks = _now_ticks(proc)
            known: Dict[int, _Known] = {}
            changed: Set[int] = set()
            self.unparsable = 0
            for pid, ino in _proc_entries(proc):
                prev = self._known.get(pid)
                if (prev is not None and prev[3] == ino and prev[2] and not full and pid not in self._watched
                        and (prev[1] is None or pid % self.rotate != turn)):
                    known[pid] = prev  # unchanged by every sign we pay to look at
                    continue
                entry = self._look(pid, ino, prev, full, now_ticks, keys, proc)
                if entry is not None:
                    known[pid] = entry
                    if prev is None or entry[1] != prev[1] or entry[4] != prev[4]:
                        changed.add(pid)
            changed.update(pid for pid in self._watched | self._marked if pid not in known)
            self._known = known
            self._logs = {pid: v for pid, v in self._logs.items() if pid in known}
            out = {pid: k[1] for pid, k in known.items() if k[1] is not None and k[4] != "zombie"}
            marked = frozenset(pid for pid, k in known.items() if k[5] and k[4] != "zombie")
            watched = frozenset(watch_set(out, marked))
            if changed & (self._watched | watched | self._marked | marked):
                self.generation += 1  # a rank, or a launcher or wrapper above one, came, went or changed
            self._watched, self._marked = watched, marked
            return out

    def logs_of(self, pid: int, proc: str = PROC) -> Tuple[str, ...]:
        """`rank_logs` of a process, listed again when it is a new process or was listed before the
        latest scan that is a multiple of `rotate`: the jobs are described again at those scans
        (`scan.discover`), so a listing is never older than `rotate` scans (an age test instead
        let a listing made just after such a scan live through the next one, to 2 * rotate - 1)."""
        with self._lock:
            entry, cached = self._known.get(pid), self._logs.get(pid)
            ident = entry[0] if entry is not None else None
            if cached is not None and cached[0] == ident and cached[1] // self.rotate == self.scans // self.rotate:
                return cached[2]
        found = rank_logs(pid, proc)
        if ident is not None:
            with self._lock:
                self._logs[pid] = (ident, self.scans, found)
        return found

    def _look(self, pid: int, ino: int, prev: Optional["_Known"], full: bool, now_ticks: float,
              keys: FrozenSet[str], proc: str) -> Optional["_Known"]:
        """Read a process's `stat`; its command line and environment too when it is new to us."""
        try:
            comm, state, ppid, start, uid = _stat_of(pid, proc)
        except OSError:
            return None  # gone
        except (ValueError, IndexError):
            self.unparsable += 1
            return None
        self.stats_read += 1
        ident = (start, comm, uid)
        if prev is not None and prev[0] == ident and prev[2] and not full:
            rec = prev[1]
            if rec is not None and rec.ppid != ppid:  # re-parented (its parent exited)
                rec = replace(rec, ppid=ppid)
            return ident, rec, True, ino, state, prev[5]
        settled = now_ticks - start >= self.settled * CLOCK_TICKS
        rec = read_record(pid, keys, proc)
        return ident, rec, settled, ino, state, is_marked(rec)


def is_marked(rec: Optional[ProcRecord]) -> bool:
    """The process carries a rank marker in its environment (it may be a rank)."""
    return rec is not None and rec.env is not None and rank_of(rec.env) is not None


def watch_set(records: Dict[int, ProcRecord], marked: Optional[Iterable[int]] = None) -> Set[int]:
    """The launchers, wrappers and other ancestors of processes carrying a rank marker (`marked`,
    else found in `records`): what a job's grouping hangs on. (The marked processes themselves
    are followed by the process probe every round; here they are looked at in turn.)"""
    out: Set[int] = set()
    for mpid in (marked if marked is not None else [p for p, r in records.items() if is_marked(r)]):
        rec = records.get(mpid)
        if rec is None:
            continue
        pid = rec.ppid
        while pid > 1 and pid not in out and pid in records and len(out) < 1 << 16:
            out.add(pid)
            pid = records[pid].ppid
    return out


#: (identity, record, read settled, /proc inode, state (psutil's name), carries a rank marker)
_Known = Tuple[Tuple[int, str, int], Optional[ProcRecord], bool, int, str, bool]


def _now_ticks(proc: str) -> float:
    """The time since boot in clock ticks, exact: /proc/uptime has the ticks' precision (1/100 s)
    and a float product does not (38272.38 * 100 is 3827237.9999...), so a process started in the
    same tick as the scan once read as younger than 0 s, and unsettled for every scan of that tick."""
    up = _uptime(proc) * CLOCK_TICKS
    return float(round(up)) if math.isfinite(up) else up


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
    for fd in sorted(fds, key=lambda s: int(s) if s.isascii() and s.isdigit() else 0)[:4096]:
        try:
            target = os.readlink(f"{proc}/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.startswith(("/dev/", "/proc/", "/sys/")):
            yield fd, target


def boot_time(proc: str = PROC) -> float:
    """The boot time (`btime` of /proc/stat, read once per procfs root); 0.0 when it cannot be read."""
    try:
        return procstat.boot_time(proc)
    except RuntimeError:
        return 0.0


CLOCK_TICKS = procstat.CLOCK_TICKS

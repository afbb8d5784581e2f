"""A process's state, CPU, threads and start time from one read of /proc/<pid>/stat, its
resident memory from one read of /proc/<pid>/statm.

Why: the process probe follows every rank each round, and going through psutil cost five file
reads per rank (stat twice, statm, status, and /proc/stat for the boot time on every
`psutil.Process`), plus psutil's object overhead: at 64 ranks the largest item of the daemon's
idle CPU. The values are the ones psutil gives, so detectors and metrics see the same strings
and numbers: the state names are psutil's, the start time is computed as psutil computes it
(boot time + start ticks / CLK_TCK), and the resident memory comes from statm as psutil's
memory_info().rss does. Not from the rss field of stat: since Linux 6.2 the memory counters are
per-CPU and stat reports them without the CPUs' pending deltas (it read 28 pages short of statm
for an idle `sleep` on a 2-CPU machine; the gap grows with the CPU count), while statm sums them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List

PROC = "/proc"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
#: Bytes read of a stat line (about 300 in practice; comm is at most 64 bytes).
STAT_BYTES = 4096

#: State letter -> psutil's status string (psutil/_pslinux.py PROC_STATUSES); '?' as psutil
#: says for a letter it does not know.
STATES: Dict[str, str] = {
    "R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop",
    "Z": "zombie", "X": "dead", "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle",
    "P": "parked",
}


@dataclass(frozen=True)
class ProcStat:
    """One process as its stat line shows it."""

    pid: int
    #: The kernel's command name (at most 15 characters; may hold spaces and parentheses).
    comm: str
    #: psutil's status string: running, sleeping, disk-sleep, stopped, zombie, ...
    state: str
    ppid: int
    #: Clock ticks after boot at which the process started: with the pid, its identity.
    start_ticks: int
    #: Epoch seconds, equal to psutil.Process(pid).create_time().
    create_time: float
    #: User plus system CPU seconds (psutil's cpu_times().user + .system).
    cpu_seconds: float
    threads: int


def parse_stat(data: bytes, boot: float) -> ProcStat:
    """Pure: a /proc/<pid>/stat line -> ProcStat (`boot`: epoch seconds of boot). The command
    name may hold spaces and ')' itself, so the fields start after the LAST ')'. Raises
    ValueError on a line that is not a stat line."""
    lpar, rpar = data.find(b"("), data.rfind(b")")
    fields = data[rpar + 2:].split()
    if lpar < 0 or rpar < lpar or len(fields) < 20:
        raise ValueError(f"not a /proc/<pid>/stat line: {data[:80]!r}")
    # Field numbers of proc(5) minus 3: state (3), ppid (4), utime (14), stime (15),
    # num_threads (20), starttime (22).
    state = fields[0].decode("ascii", "replace")
    start = int(fields[19])
    return ProcStat(pid=int(data[:lpar]), comm=os.fsdecode(data[lpar + 1:rpar]), state=STATES.get(state, "?"),
                    ppid=int(fields[1]), start_ticks=start,
                    create_time=float(start) / CLOCK_TICKS + boot,
                    cpu_seconds=float(fields[11]) / CLOCK_TICKS + float(fields[12]) / CLOCK_TICKS,
                    threads=int(fields[17]))


def read_stat(pid: int, proc: str = PROC) -> ProcStat:
    """One open and read. Raises OSError when the process is gone (FileNotFoundError,
    ProcessLookupError) or unreadable (PermissionError), ValueError on a malformed line."""
    fd = os.open(f"{proc}/{pid}/stat", os.O_RDONLY)
    try:
        data = os.read(fd, STAT_BYTES)
    finally:
        os.close(fd)
    return parse_stat(data, boot_time(proc))


def read_rss(pid: int, proc: str = PROC) -> int:
    """Resident bytes, as psutil.Process.memory_info().rss (0 for a zombie). Raises OSError as
    `read_stat` does, ValueError on a malformed file."""
    fd = os.open(f"{proc}/{pid}/statm", os.O_RDONLY)
    try:
        data = os.read(fd, 512)
    finally:
        os.close(fd)
    try:
        return int(data.split()[1]) * PAGE_SIZE
    except IndexError:
        raise ValueError(f"not a /proc/<pid>/statm line: {data[:80]!r}") from None


_boot: Dict[str, float] = {}

#: Seconds two readings of one process's start time may differ by: a start time is the boot time
#: plus ticks, and `btime` moves by a second now and then (between runs of the daemon, and where
#: a reading is not under the cached `boot_time`).
SAME_START = 2.0


def same_start(a: float, b: float) -> bool:
    """Whether two readings of start times can be one process's (see SAME_START)."""
    return abs(a - b) <= SAME_START


def boot_time(proc: str = PROC) -> float:
    """`btime` of /proc/stat (epoch seconds), read once per proc root. psutil reads it anew for
    every Process; it moves only when the wall clock is stepped, and then keeping the first value
    keeps every rank's identity (pid, start time) stable. RuntimeError when it cannot be read (as
    psutil fails then): a broken /proc is a probe error, not a vanished rank."""
    boot = _boot.get(proc)
    if boot is None:
        try:
            with open(f"{proc}/stat", "rb") as fh:
                for line in fh:
                    if line.startswith(b"btime"):
                        boot = float(line.split()[1])
                        break
        except (OSError, ValueError, IndexError) as exc:
            raise RuntimeError(f"cannot read the boot time from {proc}/stat: {exc}") from None
        if boot is None:
            raise RuntimeError(f"no btime line in {proc}/stat")
        _boot[proc] = boot
    return boot


def read_cmdline(pid: int, proc: str = PROC) -> List[str]:
    """The command line split as psutil.Process.cmdline() splits it (NUL-separated, or
    space-separated for a program that rewrote its title with spaces); [] for a zombie or a
    kernel thread. Raises OSError as `read_stat` does."""
    with open(f"{proc}/{pid}/cmdline", "rb") as fh:
        data = os.fsdecode(fh.read())
    if not data:
        return []
    sep = "\x00" if data.endswith("\x00") else " "
    if data.endswith(sep):
        data = data[:-1]
    argv = data.split(sep)
    if sep == "\x00" and len(argv) == 1 and " " in data:
        argv = data.split(" ")
    return argv


def long_name(comm: str, argv: List[str]) -> str:
    """psutil.Process.name(): the kernel truncates comm to 15 characters, so a comm that long is
    replaced by the command line's program name when that begins with it."""
    if len(comm) >= 15 and argv:
        full = os.path.basename(argv[0])
        if full.startswith(comm):
            return full
    return comm


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def read_boot_id(path: str = BOOT_ID) -> str:
    """This boot's identity (what a state file of one boot only is stamped with: kmsg sequence
    numbers restart at each boot, a chip lost in one boot is not lost in the next); the boot
    time where the kernel's boot id cannot be read."""
    try:
        with open(path, "r", encoding="ascii", errors="replace") as fh:
            got = fh.read().strip()
        if got:
            return got
    except OSError:
        pass
    try:
        return f"btime-{int(boot_time())}"
    except (OSError, RuntimeError):
        return ""

"""A rank's process record (`ProcessInfo`) read from /proc, and following a known process by its
identity (pid, start time): shared by the selector-based process probe and the one discovery
feeds (watchdog.probes.process, watchdog.probes.discovered).
"""

from __future__ import annotations

from typing import Optional, Tuple

from watchdog.host.procstat import PROC, ProcStat, long_name, read_cmdline, read_rss, read_stat
from watchdog.observations import ProcessInfo
from watchdog.privacy.argv import redact_argv
from watchdog.privacy.redact import Redactor

#: A process: (pid, start time); a pid alone is reused.
Identity = Tuple[int, float]


def describe(st: ProcStat, prev: Optional[ProcessInfo], prev_comm: Optional[str], rank: Optional[int],
             job: Optional[str] = None, hccl_env: Tuple[Tuple[str, str], ...] = (), proc: str = PROC,
             redactor: Optional[Redactor] = None) -> ProcessInfo:
    """A rank's record from its stat line read this round (`st`), one statm read for its memory,
    and its command line only when the process is new or its command name changed (an exec)
    since `prev` was made (`prev_comm`: its command name then). The values are psutil's; the name
    is psutil's name() when first seen, then kept while the command name stays (so a zombie keeps
    the full name of a long command). Raises OSError or ValueError when the process went
    meanwhile: the rank is then left out this round. `redactor` (the config's secrets) takes
    out of the command line what no option name marks (`--notify-url <the channel's webhook>`)."""
    try:
        rss = read_rss(st.pid, proc)
    except PermissionError:
        rss = 0
    fresh = prev is None or st.comm != prev_comm
    cmd: Tuple[str, ...] = () if prev is None or fresh else prev.cmdline
    name = st.comm if prev is None or fresh else prev.name
    if not cmd:
        try:
            argv = read_cmdline(st.pid, proc)
        except PermissionError:
            argv = []
        cmd = redact_argv(argv)[0] if argv else ()  # alerts and status show it: no credentials
        if redactor is not None:
            cmd = tuple(redactor.text(a, cut=False) for a in cmd)
        if fresh or argv:  # (a process caught mid-exec shows no command line yet)
            name = long_name(st.comm, argv)
    if not cmd and prev is not None:
        cmd = prev.cmdline  # a zombie has no command line left; keep the last one seen
    delta = None if prev is None else max(0.0, st.cpu_seconds - prev.cpu_seconds)
    return ProcessInfo(pid=st.pid, rank=rank, state=st.state, create_time=st.create_time, cpu_seconds=st.cpu_seconds,
                       cpu_delta=delta, rss_bytes=rss, threads=st.threads, cmdline=cmd, name=name,
                       hccl_env=hccl_env, job=job)


def follow(ident: Identity, proc: str = PROC) -> Optional[ProcStat]:
    """The process of a known identity, read afresh: None when it is gone, unreadable, or its pid
    now belongs to another process (a different start time)."""
    try:
        st = read_stat(ident[0], proc)
    except (OSError, ValueError):
        return None
    return st if abs(st.create_time - ident[1]) <= 0.01 else None

"""The process probe: finds the training ranks with psutil and records their state each round
from /proc (`watchdog.host.procstat`: a stat and a statm read per rank, psutil's values).

A rank is identified by (pid, create_time), never by pid alone: after a crash the kernel may hand
the pid to an unrelated process, which must not be taken for the rank. Once a rank has been seen,
it is followed by identity (so it stays visible as a zombie or a stopped process even though its
command line can no longer be read), and when it disappears its last record moves to `gone`
until a process with the same rank appears again (a restart).
"""

from __future__ import annotations

import glob
import logging
import os
import re
from typing import Dict, Iterable, List, Optional, Set, Tuple

import psutil

from watchdog.host import clock
from watchdog.config.sections.common import ProbeSection
from watchdog.config.sections.process import ProcessProbeConfig
from watchdog.discovery.environ import BASE_KEYS, rank_of
from watchdog.discovery.group import is_launcher_cmd, is_wrapper
from watchdog.discovery.model import ProcRecord
from watchdog.discovery.procfs import read_record
from watchdog.observations import ProcessInfo, ProcessObservation
from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError
from watchdog.probes.discovered import DiscoveredProcessProbe
from watchdog.probes.procinfo import Identity, describe, follow
from watchdog.privacy.redact import Redactor, config_secrets
from watchdog.host.procstat import ProcStat, read_stat
from watchdog.parse.untrusted import ascii_int

log = logging.getLogger(__name__)

#: Seconds a process may appear to start after its pid file's mtime (coarse timestamps).
PID_FILE_SLACK = 2.0


def read_pid_files(pattern: str) -> List[Tuple[int, float]]:
    """(pid, file mtime) listed in the file(s) matching `pattern`, one pid per line.

    The mtime guards against pid reuse: a process created after its pid file was last written
    cannot be the process the file names.
    """
    pids: List[Tuple[int, float]] = []
    paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(65536)
                mtime = os.fstat(fh.fileno()).st_mtime
        except FileNotFoundError:
            continue  # the job has not written it yet: "not started", not an error
        except OSError as exc:
            raise ProbeError(f"cannot read pid file {path}: {exc.strerror}") from None
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            pid = ascii_int(line, 1, 1 << 22)
            if pid is None:
                raise ProbeError(f"pid file {path} line {n}: expected a pid, got {line[:40]!r}")
            pids.append((pid, mtime))
    return pids


def rank_from_environ(env: Dict[str, str]) -> Optional[int]:
    """RANK (global) always wins, then RANK_ID and the MPI ranks, then LOCAL_RANK."""
    rank = rank_of(env)
    if rank is not None:
        return rank
    return ascii_int(env.get("LOCAL_RANK", ""), 0, 999_999_999)


def ranks_among(matched: Dict[Identity, psutil.Process], known: Set[Identity]) -> List[Identity]:
    """The matched processes that are ranks (issue: the launcher was taken for a rank).

    Never ranks: launchers (torchrun, `python -m torch.distributed.run`, msrun, deepspeed, mpirun),
    shell wrappers (`bash -c ...`), a process whose matched children carry other RANKs (it launched
    them), and a process below another matched rank (data-loader or compile workers). Processes
    already followed as ranks stay.
    """
    records = {ident: r for ident, r in ((i, read_record(p.pid, BASE_KEYS)) for i, p in matched.items()) if r is not None}
    by_pid = {r.pid: r for r in records.values()}
    out: List[Identity] = []
    kept = {r.pid for i, r in records.items() if i in known or not (is_launcher_cmd(r) or is_wrapper(r))}
    for r in records.values():
        mine = rank_of(r.env or {})
        if any(c.ppid == r.pid and c.pid in kept and rank_of(c.env or {}) not in (None, mine) for c in records.values()):
            kept.discard(r.pid)
    for ident, r in records.items():
        if ident in known or (r.pid in kept and not any(a in kept for a in _ancestor_pids(r, by_pid))):
            out.append(ident)
    return out


def _ancestor_pids(rec: ProcRecord, by_pid: Dict[int, ProcRecord]) -> List[int]:
    out: List[int] = []
    pid = rec.ppid
    for _ in range(64):
        if pid <= 1 or pid in out:
            break
        out.append(pid)
        parent = by_pid.get(pid)
        if parent is not None:
            pid = parent.ppid
            continue
        try:
            pid = psutil.Process(pid).ppid()
        except psutil.Error:
            break
    return out


def one_per_rank(infos: Dict[Identity, ProcessInfo]) -> Dict[Identity, ProcessInfo]:
    """At most one process per rank number (a running one before a zombie, then the newest), so
    no metric or finding is ever emitted twice with one label set."""
    best: Dict[object, Tuple[Identity, ProcessInfo]] = {}
    for ident, info in infos.items():
        key = info.rank if info.rank is not None else ("pid", ident[0])
        old = best.get(key)
        if old is None or (old[1].state == "zombie", old[1].create_time) < (info.state == "zombie", info.create_time):
            best[key] = (ident, info)
    return {ident: info for ident, info in best.values()}


class ProcessProbe(Probe):
    name = "process"

    def __init__(self, cfg: ProcessProbeConfig, user: Optional[str], launcher: Optional[str],
                 secrets: Iterable[str] = ()):
        self.cfg = cfg
        #: The config's secrets, taken out of the ranks' command lines (see `describe`).
        self.redactor = Redactor(secrets)
        self.interval = cfg.interval
        self.timeout = cfg.timeout
        self.user = cfg.user or user
        parent = cfg.parent or launcher
        self._parent_re = re.compile(parent) if parent else None
        self._cmd_re = re.compile(cfg.cmdline) if cfg.cmdline else None
        # Runtime state, kept across reloads.
        self._known: Dict[Identity, ProcessInfo] = {}
        #: Command name of each known rank when it was described (a change means an exec).
        self._comms: Dict[Identity, str] = {}
        self._gone: Dict[int, ProcessInfo] = {}
        self._first_seen_at: Optional[float] = None
        self._own_pids = self._ancestry(os.getpid())

    # -- selection -------------------------------------------------------------------------
    @staticmethod
    def _ancestry(pid: int) -> Set[int]:
        out = {pid}
        try:
            for p in psutil.Process(pid).parents():
                out.add(p.pid)
        except psutil.Error:
            pass
        return out

    def _parent_pids(self) -> Optional[Set[int]]:
        if self._parent_re is None:
            return None
        found: Set[int] = set()
        for p in psutil.process_iter(["pid", "name", "cmdline"]):
            info = p.info
            cmd = " ".join(info.get("cmdline") or ())
            if self._parent_re.search(info.get("name") or "") or self._parent_re.search(cmd):
                found.add(info["pid"])
        return found

    def _candidates(self) -> Iterable[psutil.Process]:
        if self.cfg.pid_file:
            for pid, written in read_pid_files(self.cfg.pid_file):
                try:
                    p = psutil.Process(pid)
                    if p.create_time() > written + PID_FILE_SLACK:
                        continue  # the pid was reused after the file was written: not our rank
                    yield p
                except psutil.NoSuchProcess:
                    continue
        else:
            yield from psutil.process_iter()

    def _matches(self, p: psutil.Process, parents: Optional[Set[int]]) -> bool:
        if p.pid in self._own_pids:
            return False
        try:
            with p.oneshot():
                if parents is not None and p.ppid() not in parents:
                    return False
                if self.cfg.name and p.name() != self.cfg.name:
                    return False
                if self.user and p.username() != self.user:
                    return False
                if self._cmd_re is not None and not self._cmd_re.search(" ".join(p.cmdline())):
                    return False
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.AccessDenied:
            return False
        return True

    @staticmethod
    def _env_rank(pid: int) -> Optional[int]:
        # Whitelisted keys only (environments hold secrets); None for another user's process
        # (environ not readable): the rank then falls back to start order.
        rec = read_record(pid, BASE_KEYS)
        return rank_from_environ(rec.env) if rec is not None and rec.env is not None else None

    def _select(self) -> Dict[Identity, ProcStat]:
        """Known ranks followed by identity first (zombies and stopped ranks stay visible, a
        reused pid is not the rank), then the processes the selectors match that are ranks."""
        try:
            parents = self._parent_pids()
            found = {ident: st for ident, st in ((i, follow(i)) for i in self._known) if st is not None}
            matched: Dict[Identity, psutil.Process] = {}
            stats: Dict[Identity, ProcStat] = {}
            for p in self._candidates():
                if not self._matches(p, parents):
                    continue
                try:
                    st = read_stat(p.pid)
                except (OSError, ValueError):
                    continue
                ident = (p.pid, st.create_time)
                matched.setdefault(ident, p)
                stats.setdefault(ident, st)
            for ident in ranks_among(matched, known=set(found)):
                found.setdefault(ident, stats[ident])
        except psutil.Error as exc:
            raise ProbeError(f"cannot list processes: {exc}") from None
        return found

    def collect(self) -> Collected:
        now = clock.now()
        found = self._select()
        infos: Dict[Identity, ProcessInfo] = {}
        new: List[Tuple[Identity, ProcStat]] = []
        for ident, st in found.items():
            prev = self._known.get(ident)
            if prev is None:
                new.append((ident, st))
                continue
            try:
                infos[ident] = describe(st, prev, self._comms.get(ident), prev.rank, redactor=self.redactor)
            except (OSError, ValueError):
                continue
        # New processes: rank from the environment, else the lowest free rank in start order.
        taken = {i.rank for i in infos.values() if i.rank is not None}
        pending: List[Tuple[Identity, ProcStat, Optional[int]]] = []
        for ident, st in new:
            rank = self._env_rank(ident[0])
            if rank is not None:
                taken.add(rank)
            pending.append((ident, st, rank))
        pending.sort(key=lambda t: (t[0][1], t[0][0]))
        for ident, st, rank in pending:
            if rank is None:
                rank = next(r for r in range(len(taken) + len(pending) + 1) if r not in taken)
                taken.add(rank)
            try:
                infos[ident] = describe(st, None, None, rank, redactor=self.redactor)
            except (OSError, ValueError):
                continue
        infos = one_per_rank(infos)
        self._comms = {ident: found[ident].comm for ident in infos}

        for ident, old in self._known.items():
            if ident not in infos and old.rank is not None:
                self._gone[old.rank] = old
        alive_ranks = {i.rank for i in infos.values()}
        for r in list(self._gone):
            if r in alive_ranks:
                del self._gone[r]  # restarted
        self._known = infos
        if infos and self._first_seen_at is None:
            self._first_seen_at = now

        procs = tuple(sorted(infos.values(), key=lambda i: (i.rank if i.rank is not None else 1 << 30, i.pid)))
        gone = tuple(self._gone[r] for r in sorted(self._gone))
        obs = ProcessObservation(processes=procs, expected=self.cfg.expected, gone=gone,
                                 first_seen_at=self._first_seen_at)
        states: Dict[str, int] = {}
        for i in procs:
            states[i.state] = states.get(i.state, 0) + 1
        expected = f"/{self.cfg.expected}" if self.cfg.expected else ""
        summary = f"{len(procs)}{expected} ranks" + (
            " (" + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")" if states else "")
        if gone:
            summary += f", gone: {', '.join(str(g.rank) for g in gone)}"
        return Collected(obs, summary)

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, ProcessProbe):
            return False
        self.cfg, self.interval, self.timeout = new.cfg, new.interval, new.timeout
        self.user, self._parent_re, self._cmd_re = new.user, new._parent_re, new._cmd_re
        self.redactor = new.redactor
        return True


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 10
#: Its config: `probes.process`; discovery feeds it (first in `discovery.feed`).
SECTION: ProbeSection[ProcessProbeConfig] = ProbeSection("process", ProcessProbeConfig, feed=1)


def build(ctx: ProbeContext) -> List[Probe]:
    cfg = ctx.config.probes.process
    if not cfg.enabled:
        return []
    if ctx.config.fed_by_discovery("process"):
        return [DiscoveredProcessProbe(ctx.config, ctx.discovery_feed(), ctx.state_dir)]
    return [ProcessProbe(cfg, ctx.config.job.user, ctx.config.job.launcher, config_secrets(ctx.config))]

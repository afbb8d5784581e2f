"""Which processes are ranks, which are launchers or helpers, and which ranks form one job.

Pure over a pid -> ProcRecord map, so every rule is tested on hand-made process trees:
- a rank carries a rank marker in its environment (RANK always wins over RANK_ID and the MPI keys);
- launchers (torchrun, `python -m torch.distributed.run`, msrun, deepspeed, mpirun, ...) and shell
  wrappers (`bash -c ...`) are never ranks, even when their environment carries RANK, and neither
  is a process whose marked children carry other rank numbers (it launched them);
- a process below a rank (data-loader or compile workers inherit RANK) is a helper, not a rank;
- ranks sharing a launcher are one job; without one, ranks sharing MASTER_ADDR:MASTER_PORT are;
- within a job a rank number is held by one process only (the earliest started), so the probes
  can never emit two series with one label set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

from watchdog.discovery.environ import DEVICE_KEYS, JOB_SHARED_KEYS, rank_of
from watchdog.discovery.model import ProcRecord

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
LAUNCHER_EXES = frozenset({"torchrun", "msrun", "deepspeed", "mpirun", "mpiexec", "orterun", "prterun",
                           "hydra_pmi_proxy", "orted", "prted", "srun", "horovodrun"})
LAUNCHER_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch", "deepspeed.launcher.launch",
                              "deepspeed.launcher.runner", "mindspore.parallel.cluster.run"})
#: Never follow parents above this (init; and the walk is bounded in any case).
MAX_DEPTH = 64


@dataclass(frozen=True)
class RawJob:
    """Ranks grouped into one job, before anything is read about them."""

    key: str
    launcher: Optional[int]
    #: (rank number, pid), sorted by rank.
    ranks: Tuple[Tuple[int, int], ...]


def _base(arg: str) -> str:
    return os.path.basename(arg)


def is_python(rec: ProcRecord) -> bool:
    return bool(rec.cmdline) and _base(rec.cmdline[0]).startswith("python")


def is_launcher_cmd(rec: ProcRecord) -> bool:
    """torchrun & co by executable, by `python -m <module>`, or by `python /path/to/torchrun`."""
    argv = rec.cmdline
    if not argv:
        return False
    if _base(argv[0]) in LAUNCHER_EXES or rec.name in LAUNCHER_EXES:
        return True
    if is_python(rec):
        for i, arg in enumerate(argv[1:4], 1):
            if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in LAUNCHER_MODULES:
                return True
            if not arg.startswith("-"):
                return _base(arg) in LAUNCHER_EXES
    return False


def is_wrapper(rec: ProcRecord) -> bool:
    """A shell (bash -c "...", a launch script): it starts ranks, it is never one."""
    return rec.name in SHELLS or (bool(rec.cmdline) and _base(rec.cmdline[0]) in SHELLS)


def ancestors(pid: int, records: Dict[int, ProcRecord]) -> Iterable[int]:
    seen: Set[int] = {pid}
    rec = records.get(pid)
    for _ in range(MAX_DEPTH):
        if rec is None or rec.ppid in seen or rec.ppid <= 1:
            return
        seen.add(rec.ppid)
        yield rec.ppid
        rec = records.get(rec.ppid)


def _launchers_by_children(marked: Dict[int, int], records: Dict[int, ProcRecord]) -> Set[int]:
    """Marked processes whose marked children carry a rank number other than their own."""
    out: Set[int] = set()
    for pid, rank in marked.items():
        parent = records[pid].ppid
        if parent in marked and marked[parent] != rank:
            out.add(parent)
    return out


def classify(records: Dict[int, ProcRecord], ignore: Iterable[int] = (),
             only: Tuple[Tuple[str, str], ...] = ()) -> Tuple[Dict[int, int], Set[int]]:
    """(rank pid -> rank number, launcher pids). Helpers and wrappers are in neither; with `only`,
    ranks lacking one of its (key, value) pairs are left out too."""
    ignored = set(ignore)
    launchers = {pid for pid, r in records.items() if is_launcher_cmd(r)}
    marked: Dict[int, int] = {}
    for pid, rec in records.items():
        if pid in ignored or rec.env is None:
            continue
        rank = rank_of(rec.env)
        if rank is not None:
            marked[pid] = rank
    launchers |= _launchers_by_children(marked, records)
    candidates = {pid: rank for pid, rank in marked.items()
                  if pid not in launchers and not is_wrapper(records[pid])}
    ranks = {pid: rank for pid, rank in candidates.items()
             if not any(a in candidates for a in ancestors(pid, records))
             and all((records[pid].env or {}).get(k) == v for k, v in only)}
    return ranks, launchers


def _job_key(pid: int, records: Dict[int, ProcRecord], launchers: Set[int],
             spawners: Set[int], name_env: Tuple[str, ...] = ()) -> Tuple[str, Optional[int]]:
    rec = records[pid]
    for a in ancestors(pid, records):
        if a in launchers:
            return f"launcher:{a}", a
    if rec.ppid in spawners:
        return f"launcher:{rec.ppid}", rec.ppid
    env = rec.env or {}
    addr, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
    if addr and port:
        return f"master:{addr}:{port}", _wrapper_parent(rec, records)
    parent = _wrapper_parent(rec, records)
    if parent is not None:
        return f"parent:{parent}", parent
    # Orphans (their launch script started them in the background and left): one user's ranks,
    # split by what a job's ranks share, its name (`NPU_WATCHDOG_JOB`, ...) and rank table.
    shared = [env.get(k, "") for k in tuple(name_env) + JOB_SHARED_KEYS]
    return f"uid:{rec.uid}:" + "\x1f".join(shared), None


def _wrapper_parent(rec: ProcRecord, records: Dict[int, ProcRecord]) -> Optional[int]:
    """The rank's parent when it is a shell wrapper or launch script (shown as the launcher)."""
    parent = records.get(rec.ppid)
    if parent is not None and rec.ppid > 1 and is_wrapper(parent):
        return rec.ppid
    return None


def _another_job(pid: int, holder: int, key: str, records: Dict[int, ProcRecord]) -> bool:
    """A process carrying a rank number its group already holds is a helper (a data loader worker
    inherits RANK; a double-forked one even leaves the tree), except among orphans grouped only by
    their user: there a process on other NPUs than the holder's, not descending from it, is the
    rank of another job started alike (two jobs' launch scripts that left)."""
    if not key.startswith("uid:") or holder in set(ancestors(pid, records)):
        return False
    devices = lambda p: tuple((records[p].env or {}).get(k, "") for k in DEVICE_KEYS)  # noqa: E731
    return devices(pid) != devices(holder)


def group_jobs(records: Dict[int, ProcRecord], ignore: Iterable[int] = (),
               only: Tuple[Tuple[str, str], ...] = (), name_env: Tuple[str, ...] = ()) -> List[RawJob]:
    """The jobs on the node: ranks grouped by launcher (else rendezvous, else parent, else the
    user and what the job's ranks share). A process whose rank number its group already holds is
    a helper when it descends from that group's ranks (a data loader worker inherits RANK), else
    the rank of another job grouped alike (two jobs' orphaned ranks): a group of its own."""
    ranks, launchers = classify(records, ignore, only)
    per_parent: Dict[int, int] = {}
    for pid in ranks:
        per_parent[records[pid].ppid] = per_parent.get(records[pid].ppid, 0) + 1
    #: An unrecognised parent of several ranks (a custom launcher) is their launcher too.
    spawners = {ppid for ppid, n in per_parent.items() if n >= 2 and ppid > 1 and ppid in records}
    groups: Dict[str, Tuple[Optional[int], Dict[int, int]]] = {}
    for pid in sorted(ranks, key=lambda p: (records[p].start_ticks, p)):
        base, launcher = _job_key(pid, records, launchers, spawners, name_env)
        key = base
        for n in range(2, len(ranks) + 2):
            entry = groups.setdefault(key, (launcher, {}))
            held = entry[1]
            if ranks[pid] not in held:
                held[ranks[pid]] = pid
                break
            if not _another_job(pid, held[ranks[pid]], base, records):
                break  # a helper of the rank that holds the number
            key = f"{base}#{n}"
    jobs = [RawJob(key=k, launcher=l, ranks=tuple(sorted(rs.items()))) for k, (l, rs) in groups.items()]
    return sorted(jobs, key=lambda j: min(records[p].start_ticks for _, p in j.ranks))

"""What discovery reports: jobs, their launcher and ranks, and what each rank exposes.

`Discovered.to_json()` is the documented `npu-watchdog discover --json` schema; keep it exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple


@dataclass(frozen=True)
class ProcRecord:
    """One process as procfs shows it; `env` holds whitelisted keys only (None: unreadable)."""

    pid: int
    ppid: int
    uid: int
    #: Start time in clock ticks since boot (field 22 of /proc/<pid>/stat): with the pid, an identity.
    start_ticks: int
    name: str
    cmdline: Tuple[str, ...]
    env: Optional[Dict[str, str]] = None


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: Optional[int]
    pid: int
    npu: Optional[int]
    logs: Tuple[str, ...] = ()
    heartbeat: Optional[str] = None
    #: The rank's user: every file of the rank (heartbeat, ring, logs) must belong to it (see
    #: `watchdog.host.rankfiles`). Not part of the `discover --json` schema.
    uid: Optional[int] = None
    #: Epoch seconds the rank's process started: a kernel record older than that names an
    #: earlier process with the same pid. Not part of the `discover --json` schema.
    started_at: Optional[float] = None
    #: The rank's command name (comm) when scanned: a kernel record names the rank only when
    #: its pid and its command name are the rank's. Not part of the `discover --json` schema.
    comm: Optional[str] = None


@dataclass(frozen=True)
class LauncherInfo:
    pid: int
    cmdline: str


@dataclass(frozen=True)
class HcclTimeouts:
    """Effective HCCL timeouts in seconds: the ranks' environment, else the CANN defaults."""

    exec_timeout_s: Optional[int] = None
    connect_timeout_s: Optional[int] = None
    #: Where the values came from: "environment" or "default".
    source: str = "default"


@dataclass(frozen=True)
class JobInfo:
    name: str
    launcher: Optional[LauncherInfo]
    world_size: Optional[int]
    #: Ranks expected on this node (LOCAL_WORLD_SIZE), when the environment says.
    local_world_size: Optional[int]
    ranks: Tuple[RankInfo, ...]
    plog_dirs: Tuple[str, ...] = ()
    heartbeats: Tuple[str, ...] = ()
    hccl: HcclTimeouts = field(default_factory=HcclTimeouts)
    #: Epoch seconds the job started (its launcher, else its earliest rank).
    started_at: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "launcher": None if self.launcher is None else {"pid": self.launcher.pid,
                                                            "cmdline": self.launcher.cmdline},
            "world_size": self.world_size,
            "ranks": [{"rank": r.rank, "local_rank": r.local_rank, "pid": r.pid, "npu": r.npu,
                       "logs": list(r.logs)} for r in self.ranks],
            "plog_dirs": list(self.plog_dirs),
            "heartbeats": list(self.heartbeats),
            "hccl": {"exec_timeout_s": self.hccl.exec_timeout_s,
                     "connect_timeout_s": self.hccl.connect_timeout_s},
        }


@dataclass(frozen=True)
class Discovered:
    jobs: Tuple[JobInfo, ...] = ()
    #: When the scan ran (epoch seconds) and how long it took.
    at: float = 0.0
    duration_seconds: float = 0.0
    #: Processes looked at, and those whose environment could not be read (another user's).
    processes_scanned: int = 0
    unreadable: int = 0
    #: Processes left out of the last scan because what they show could not be parsed (another
    #: user's hostile environment or /proc record): counted, never the end of the scan.
    skipped: int = 0

    def to_json(self) -> Dict[str, Any]:
        return {"jobs": [j.to_json() for j in self.jobs]}

"""One discovery round: procfs -> jobs with their ranks, NPUs, logs, plog folders, heartbeats, HCCL.

I/O lives in `procfs`; the decisions (`group`, `describe_job`) are pure functions of what was read.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from watchdog.host import clock
from watchdog.discovery import procfs
from watchdog.discovery.cmdline import redact_argv
from watchdog.discovery.environ import (CONTAINER_DEVICES_KEY, DEVICE_KEYS, HEARTBEAT_ENV, LOCAL_RANK_KEYS, LOCAL_WORLD_SIZE_KEYS,
                                        WORLD_SIZE_KEYS, first_int, wanted_keys)
from watchdog.discovery.group import RawJob, group_jobs
from watchdog.discovery.model import (Discovered, HcclTimeouts, JobInfo, LauncherInfo, ProcRecord, RankInfo)
from watchdog.parse.hccl import CANN_CONNECT_TIMEOUT, CANN_EXEC_TIMEOUT
from watchdog.parse.untrusted import ascii_int

#: CANN defaults (whole seconds, as discovery reports them) when the ranks' environment does not
#: set them: the one definition is watchdog.parse.hccl's.
HCCL_EXEC_TIMEOUT_DEFAULT = int(CANN_EXEC_TIMEOUT)
HCCL_CONNECT_TIMEOUT_DEFAULT = int(CANN_CONNECT_TIMEOUT)
#: Job-name keys read from the ranks' environment when the config does not name others.
DEFAULT_NAME_ENV = ("NPU_WATCHDOG_JOB", "SLURM_JOB_NAME", "JOB_NAME")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9._:-]+")
_SCRIPT = re.compile(r"\.(py|sh)$")
log = logging.getLogger(__name__)
#: Pids a "skipped" warning was logged for (once each, not every scan).
_WARNED: set = set()


@dataclass(frozen=True)
class ScanOptions:
    name_env: Tuple[str, ...] = DEFAULT_NAME_ENV
    #: Pids never taken for ranks (the daemon and its ancestors).
    ignore: Tuple[int, ...] = ()
    proc: str = procfs.PROC
    #: Only ranks whose environment carries all these (key, value) pairs.
    only: Tuple[Tuple[str, str], ...] = ()
    #: An explicit `job.name`: it labels the oldest job discovered.
    first_job_name: Optional[str] = None
    #: Home folder of a uid (the plog default lives there); replaceable in tests.
    home_of: Callable[[int], Optional[str]] = field(default=lambda uid: _home(uid))
    #: Takes the config's secrets out of a launcher's command line: what no option name marks
    #: (`--notify-url <the channel's webhook>`; only a URL's user and query are cut here).
    redact: Callable[[str], str] = field(default=lambda text: text)


_HOMES: Dict[int, Tuple[float, Optional[str]]] = {}
#: A user's home folder is looked up again after this long (each lookup reads the user database).
HOME_TTL = 300.0


def _home(uid: int) -> Optional[str]:
    now = time.monotonic()
    cached = _HOMES.get(uid)
    if cached is not None and now - cached[0] < HOME_TTL:
        return cached[1]
    try:
        home: Optional[str] = pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = None
    if len(_HOMES) > 4096:
        _HOMES.clear()
    _HOMES[uid] = (now, home)
    return home


def label_safe(text: str, fallback: str = "job") -> str:
    """A job name usable as a label value (letters, digits, . _ : -, max 128, alnum first)."""
    cleaned = _LABEL_BAD.sub("-", text).strip("-._:")[:128]
    return cleaned if cleaned and cleaned[0].isalnum() else fallback


def npu_of(env: Mapping[str, str], local_rank: Optional[int]) -> Optional[int]:
    """The NPU a rank uses from its environment: device id (or the local rank) through the
    visible-devices list when one is set (ASCEND_RT_VISIBLE_DEVICES, else the container's
    ASCEND_VISIBLE_DEVICES)."""
    logical = first_int(env, DEVICE_KEYS[1:])
    listed = env.get("ASCEND_RT_VISIBLE_DEVICES", "").strip() or env.get(CONTAINER_DEVICES_KEY, "")
    visible = [v.strip() for v in listed.split(",") if v.strip()]
    if visible:
        index = logical if logical is not None else local_rank
        if index is not None and index < len(visible):
            return ascii_int(visible[index], 0, 65535)
        return None
    return logical


def hccl_of(envs: Sequence[Mapping[str, str]]) -> HcclTimeouts:
    """The largest value any rank sets (a collective waits for its most patient peer), else defaults."""
    def pick(key: str) -> Optional[int]:
        vals = [v for v in (first_int(e, (key,)) for e in envs) if v is not None]
        return max(vals) if vals else None
    exec_t, conn_t = pick("HCCL_EXEC_TIMEOUT"), pick("HCCL_CONNECT_TIMEOUT")
    source = "environment" if exec_t is not None or conn_t is not None else "default"
    return HcclTimeouts(exec_timeout_s=exec_t if exec_t is not None else HCCL_EXEC_TIMEOUT_DEFAULT,
                        connect_timeout_s=conn_t if conn_t is not None else HCCL_CONNECT_TIMEOUT_DEFAULT,
                        source=source)


def heartbeat_path(env: Mapping[str, str], rank: int, local_rank: Optional[int]) -> Optional[str]:
    """NPU_WATCHDOG_HEARTBEAT: a file path ({rank} and {local_rank} are filled in) or a folder
    (then `rank<N>.json` inside it)."""
    value = env.get(HEARTBEAT_ENV, "").strip()
    if not value.startswith("/"):
        return None
    value = value.replace("{rank}", str(rank)).replace("{local_rank}", str(local_rank if local_rank is not None else rank))
    if value.endswith("/") or os.path.isdir(value):
        return os.path.join(value, f"rank{rank}.json")
    return value


def plog_dirs_of(env: Mapping[str, str], home: Optional[str]) -> Tuple[str, ...]:
    root = env.get("ASCEND_PROCESS_LOG_PATH", "").strip()
    if not root.startswith("/"):
        if not home:
            return ()
        root = os.path.join(home, "ascend", "log")
    return (os.path.join(root, "debug", "plog"), os.path.join(root, "run", "plog"))


def job_name(raw: RawJob, records: Dict[int, ProcRecord], name_env: Iterable[str], started_at: float) -> str:
    """From the ranks' environment (first configured key set), else `<script>-<start time>`."""
    keys = tuple(name_env)
    for _, pid in raw.ranks:
        env = records[pid].env or {}
        for key in keys:
            if env.get(key, "").strip():
                return label_safe(env[key].strip())
    argv = records[raw.launcher].cmdline if raw.launcher in records else records[raw.ranks[0][1]].cmdline
    script = next((os.path.basename(a) for a in argv[1:] if _SCRIPT.search(a)), os.path.basename(argv[0]))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started_at))
    return label_safe(f"{_SCRIPT.sub('', script)}-{stamp}")


def _describe_rank(rank: int, rec: ProcRecord, logs: Tuple[str, ...], npu_by_pid: Mapping[int, int],
                   opts: ScanOptions, boot: float) -> Tuple[RankInfo, Tuple[str, ...]]:
    """One rank and its plog folders, from its (untrusted) environment."""
    env = rec.env or {}
    local = first_int(env, LOCAL_RANK_KEYS)
    npu = npu_by_pid.get(rec.pid, npu_of(env, local))
    # The file is named whoever owns it: the heartbeat probe checks it against `uid` at every read
    # (watchdog.host.rankfiles), so a file that is not the rank's user's is a finding, never content.
    hb = heartbeat_path(env, rank, local)
    info = RankInfo(rank=rank, local_rank=local, pid=rec.pid, npu=npu, logs=logs, heartbeat=hb, uid=rec.uid,
                    started_at=boot + rec.start_ticks / procfs.CLOCK_TICKS, comm=rec.name)
    return info, plog_dirs_of(env, opts.home_of(rec.uid))


def describe_job(raw: RawJob, records: Dict[int, ProcRecord], logs: Mapping[int, Tuple[str, ...]],
                 npu_by_pid: Mapping[int, int], opts: ScanOptions, boot: float,
                 skipped: Optional[List[int]] = None) -> JobInfo:
    """Everything discovery knows about one grouped job (pure apart from `home_of`). A rank whose
    record cannot be described is left out and its pid added to `skipped`; ValueError when none
    is left."""
    ranks: List[RankInfo] = []
    envs = []
    plogs: List[str] = []
    beats: List[str] = []
    for rank, pid in raw.ranks:
        rec = records[pid]
        env = rec.env or {}
        try:
            info, dirs = _describe_rank(rank, rec, logs.get(pid, ()), npu_by_pid, opts, boot)
        except (ValueError, TypeError, IndexError, KeyError, OverflowError, OSError) as exc:
            # Another user's process whose record cannot be made sense of: skipped and counted,
            # never the end of the scan (the parsers are total; this is the net under them).
            if pid not in _WARNED:
                if len(_WARNED) >= 4096:
                    _WARNED.clear()
                _WARNED.add(pid)
                log.warning("discovery skipped process %d: %s: %s", pid, type(exc).__name__, str(exc)[:200])
            if skipped is not None:
                skipped.append(pid)
            continue
        envs.append(env)
        ranks.append(info)
        plogs.extend(d for d in dirs if d not in plogs)
        if info.heartbeat and info.heartbeat not in beats:
            beats.append(info.heartbeat)
    if not ranks:
        raise ValueError("no rank of the job could be described")
    first = records[raw.launcher] if raw.launcher in records else min(
        (records[p] for _, p in raw.ranks), key=lambda r: r.start_ticks)
    started_at = boot + first.start_ticks / procfs.CLOCK_TICKS
    launcher = None
    if raw.launcher in records:
        launcher = LauncherInfo(pid=raw.launcher, cmdline=opts.redact(redact_argv(records[raw.launcher].cmdline)))
    return JobInfo(name=job_name(raw, records, opts.name_env, started_at), launcher=launcher,
                   world_size=next((v for v in (first_int(e, WORLD_SIZE_KEYS) for e in envs) if v is not None), None),
                   local_world_size=next((v for v in (first_int(e, LOCAL_WORLD_SIZE_KEYS) for e in envs)
                                          if v is not None), None),
                   ranks=tuple(ranks), plog_dirs=tuple(plogs), heartbeats=tuple(beats), hccl=hccl_of(envs),
                   started_at=started_at)


def unique_names(jobs: List[JobInfo]) -> List[JobInfo]:
    """Two jobs never share a name (a second job is a second label): later ones get `-<pid>`."""
    from dataclasses import replace

    seen: Dict[str, int] = {}
    out = []
    for j in jobs:
        if j.name in seen:
            j = replace(j, name=label_safe(f"{j.name[:110]}-{j.launcher.pid if j.launcher else j.ranks[0].pid}"))
        seen[j.name] = 1
        out.append(j)
    return out


def _describe_jobs(records: Dict[int, ProcRecord], logs_of: Callable[[int, str], Tuple[str, ...]],
                   npu_by_pid: Mapping[int, int], opts: ScanOptions,
                   skipped: Optional[List[int]] = None) -> List[JobInfo]:
    raw_jobs = group_jobs(records, opts.ignore, opts.only, tuple(opts.name_env))
    logs = {pid: logs_of(pid, opts.proc) for j in raw_jobs for _, pid in j.ranks}
    boot = procfs.boot_time(opts.proc)
    out: List[JobInfo] = []
    for j in raw_jobs:
        try:
            out.append(describe_job(j, records, logs, npu_by_pid, opts, boot, skipped))
        except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
            log.warning("discovery skipped a job of %d processes: %s", len(j.ranks), str(exc)[:200])
    return out


def discover(opts: ScanOptions, npu_by_pid: Optional[Mapping[int, int]] = None,
             table: Optional[procfs.ProcTable] = None) -> Discovered:
    """One scan of the node; with `table` (kept by the caller across scans), only processes new
    since its last scan have their command line and environment read."""
    started = time.monotonic()
    keys = wanted_keys(tuple(opts.name_env) + tuple(k for k, _ in opts.only))
    records = table.read(keys, opts.proc) if table is not None else procfs.read_all(keys, opts.proc)
    skipped: List[int] = []
    if table is None:
        jobs = _describe_jobs(records, procfs.rank_logs, npu_by_pid or {}, opts, skipped)
    else:
        # The same records (and NPU table) describe the same jobs: reuse them, except every
        # `rotate` scans (rank log files listed again).
        key = (table.generation, tuple(sorted((npu_by_pid or {}).items())), opts)
        if table.memo is not None and table.memo[0] == key and table.scans % table.rotate:
            jobs, skipped = table.memo[1]  # type: ignore[misc]
            jobs = list(jobs)
        else:
            jobs = _describe_jobs(records, table.logs_of, npu_by_pid or {}, opts, skipped)
            table.memo = (key, (tuple(jobs), skipped))
    if opts.first_job_name and jobs:
        from dataclasses import replace

        jobs = [replace(jobs[0], name=opts.first_job_name)] + [j for j in jobs[1:] if j.name != opts.first_job_name]
    unreadable = sum(1 for r in records.values() if r.env is None)
    return Discovered(jobs=tuple(unique_names(jobs)), at=clock.now(), duration_seconds=time.monotonic() - started,
                      processes_scanned=len(records), unreadable=unreadable,
                      skipped=len(set(skipped)) + (table.unparsable if table is not None else 0))

"""Records that probes put into the state store and detectors read.

These are the contract between the probes and the detectors (including the fused stall rule,
which reads several of them together) and the pure parsers that build them (`watchdog.npusmi`):
records other code shares without importing a probe's I/O. A probe may extend its record in its
own module (the logs probe's `LogProbeObservation`), and a new probe declares its record there.
Probes may add fields; they keep these names and meanings. A record of a probe discovery feeds
says how one job's view narrows it (`for_job`, see `JobScoped`). All times are epoch seconds
(time.time()); all sizes bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Tuple

from watchdog.compat import Protocol, runtime_checkable  # 3.7: from typing_extensions
from watchdog.parse.pace import PaceMark

from watchdog.core.state import RecordKey


@runtime_checkable
class JobScoped(Protocol):
    """A record one discovered job's view narrows to that job (`watchdog.detectors.jobs`): the
    records of the probes discovery feeds. `first`: the node's oldest job, which also owns what
    no job claims (explicitly configured files)."""

    def for_job(self, job: "JobState", first: bool) -> Any: ...


# --- process probe -------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    #: Rank from RANK/LOCAL_RANK in the environment, else by order of start time; None if unknown.
    rank: Optional[int]
    #: psutil status: running, sleeping, disk-sleep, zombie, stopped, ...
    state: str
    create_time: float
    cpu_seconds: float
    #: CPU seconds used since the previous round (None on the first sighting).
    cpu_delta: Optional[float]
    rss_bytes: int
    threads: int
    cmdline: Tuple[str, ...] = ()
    name: str = ""
    #: The rank's HCCL settings as (name, value) pairs (`watchdog.parse.hccl.ENV_KEYS` only) when its
    #: environment is visible; the cascade windows follow them (see watchdog.parse.hccl).
    hccl_env: Tuple[Tuple[str, str], ...] = ()
    #: The discovered job this rank belongs to (None: the process probe's explicit selectors).
    job: Optional[str] = None
    #: The NPU the rank runs on, as discovery found it (npu-smi's process table, else the
    #: rank's device variables), kept once known: a chip that vanishes still names its job.
    npu: Optional[int] = None


@dataclass(frozen=True)
class EndEvidence:
    """What is known about ranks of a discovered job leaving: the record the clean-end decision
    (`watchdog.detectors.liveness.judge_end`) reads. Gathered by the process probe when ranks
    exit (their logs and heartbeat files are complete then); other probes' signs are added by the
    detector from their own observations (the kernel's kill of one of the job's pids)."""

    #: Ranks of the job seen on this node, and how many of them have left.
    ranks: int = 0
    gone: int = 0
    #: Departed ranks whose heartbeat declared phase `done`, and ranks with a heartbeat file.
    done: int = 0
    heartbeats: int = 0
    #: An end-of-training line (`discovery.end_patterns`) in the ranks' or launcher's last lines.
    end_line: str = ""
    #: The gravest failure line (a log rule of severity warning or above) in the ranks' or the
    #: launcher's last lines, as `rule_id: line`.
    failure_line: str = ""
    #: The gravest line of a generic vocabulary rule there (a failure's shape in a wording no exact
    #: rule knows, which may be an error the job handled): never a failure sign by itself, it
    #: names the likely cause when another sign (an exit status, ranks leaving apart) says failure.
    shape_line: str = ""
    #: When the first and the last rank not declared `done` were seen gone (None: none yet).
    first_left_at: Optional[float] = None
    last_left_at: Optional[float] = None
    #: A kernel kill or segfault of one of the job's pids (the kernel probe's line), else None.
    kernel_kill: Optional[str] = None
    #: The first of the job's processes (ranks and launcher) to exit, when it exited non-zero or
    #: by a signal other than a stop request (SIGTERM, SIGINT, SIGHUP), as the kernel's process
    #: events report it: "rank 1 (pid 4242) exit status 1"; empty when none did or when the
    #: events are not available (`exit_source` says which).
    first_exit: str = ""
    #: The first of the job's processes to exit, when a stop request (SIGTERM, SIGINT, SIGHUP)
    #: ended it: "rank 0 (pid 4242) terminated (signal 15)". A cancel or a preemption, not a clean
    #: end: nothing says the job was done (the `stopped` row, after the clean-end rows).
    first_stop: str = ""
    #: first_exit and first_stop in Chinese ("rank 1（pid 4242）退出码 1"): the Chinese message
    #: is written from its rule's template, so the facts travel in both languages.
    first_exit_zh: str = ""
    first_stop_zh: str = ""
    #: Where exit statuses came from: "process events", or "" (only /proc and the launchers' lines).
    exit_source: str = ""
    #: (pid, "exit status 1" / "killed (signal 9)") of the job's processes that exited, as known.
    exits: Tuple[Tuple[int, str], ...] = ()


@dataclass(frozen=True)
class JobState:
    """A discovered job as the process probe follows it over its life."""

    name: str
    first_seen_at: float
    #: Ranks expected on this node (LOCAL_WORLD_SIZE, else `probes.process.expected`, else None).
    expected: Optional[int] = None
    #: When its last rank exited (None while any runs).
    ended_at: Optional[float] = None
    #: A producer's own word that the job ended cleanly (the discovered process probe gives
    #: `end` evidence instead, judged by the liveness detector).
    clean_end: bool = False
    launcher_pid: Optional[int] = None
    #: Evidence about the ranks that left (None while every rank runs).
    end: Optional[EndEvidence] = None


@dataclass(frozen=True)
class ProcessObservation:
    processes: Tuple[ProcessInfo, ...]
    expected: Optional[int] = None
    #: Ranks that were seen before and are gone now, with their last ProcessInfo.
    gone: Tuple[ProcessInfo, ...] = ()
    #: When the probe first saw any rank process (None: the job has not started yet).
    first_seen_at: Optional[float] = None
    #: Discovered jobs (empty when ranks are selected by explicit settings).
    jobs: Tuple[JobState, ...] = ()
    #: The job ended cleanly: its ranks exiting is not a crash (set on per-job views).
    clean_end: bool = False
    #: Ranks come from discovery (no "not started" finding: a node without a job is normal).
    discovered: bool = False

    def for_job(self, job: JobState, first: bool) -> "ProcessObservation":
        """The job's ranks, and the job's own expectations and end."""
        return replace(self, processes=tuple(p for p in self.processes if p.job == job.name),
                       gone=tuple(g for g in self.gone if g.job == job.name),
                       expected=job.expected, first_seen_at=job.first_seen_at, jobs=(job,),
                       clean_end=job.clean_end)


#: The process probe's records.
PROCESS: RecordKey[ProcessObservation] = RecordKey("process")


# --- heartbeat probe -----------------------------------------------------------------------

@dataclass(frozen=True)
class HeartbeatReading:
    path: str
    rank: Optional[int]
    exists: bool
    mtime: Optional[float] = None
    #: Heartbeat time: the JSON `time` field if present, else the file mtime.
    beat_time: Optional[float] = None
    step: Optional[int] = None
    phase: Optional[str] = None
    loss: Optional[float] = None
    grad_norm: Optional[float] = None
    loss_scale: Optional[float] = None
    throughput: Optional[float] = None
    fields: Dict[str, Any] = field(default_factory=dict)
    #: A read or parse problem this round (the previous good reading stays in history).
    error: Optional[str] = None
    #: Epoch time (the heartbeat's own clock) of the rank's last progress: the step advanced or
    #: the declared phase changed (e.g. a checkpoint began or ended). The no-progress and fused
    #: stall rules read it; None when the heartbeat carries no `step`.
    step_changed_at: Optional[float] = None
    #: "json" or "mtime" (a touched file whose modification time is the heartbeat).
    format: str = "json"
    #: "tokens_per_s" or "samples_per_s": which field `throughput` came from.
    throughput_unit: Optional[str] = None
    #: Trainer pid, when the heartbeat carries one.
    pid: Optional[int] = None
    #: Since when the file has been unreadable without a good read in between (None when fine).
    error_since: Optional[float] = None
    #: Read/parse failures of this file since the probe started (a counter, starts at 0).
    read_errors_total: int = 0
    #: Learned-threshold bookkeeping, kept by the probe for the whole life of the job: when the
    #: current run of `train` began (reset by a step going backwards, i.e. a restart), the largest
    #: gap between two step advances seen within `train`, and how many such gaps were measured.
    train_since: Optional[float] = None
    max_step_gap: Optional[float] = None
    step_gaps: int = 0
    #: The newest records of the rank's flight recorder (`<path>.ring`), oldest first, when it has
    #: one; `flight_error` says why it could not be read (a damaged or foreign file).
    flight_tail: Tuple[Dict[str, Any], ...] = ()
    flight_error: Optional[str] = None
    #: The discovered job of the rank writing this file (None: explicit `probes.heartbeat.paths`).
    job: Optional[str] = None


@dataclass(frozen=True)
class HeartbeatObservation:
    readings: Tuple[HeartbeatReading, ...]

    def for_job(self, job: JobState, first: bool) -> "HeartbeatObservation":
        """The job's ranks' files (configured paths belong to the first job)."""
        return replace(self, readings=tuple(r for r in self.readings
                                            if r.job == job.name or (r.job is None and first)))


#: The heartbeat probe's records.
HEARTBEAT: RecordKey[HeartbeatObservation] = RecordKey("heartbeat")


# --- npu probe -----------------------------------------------------------------------------

@dataclass(frozen=True)
class NpuChip:
    npu: int
    chip: int
    device_id: Optional[int]
    name: str
    health: str
    power_w: Optional[float]
    temp_c: Optional[float]
    aicore_util_pct: Optional[float]
    memory_used_mb: Optional[int]
    memory_total_mb: Optional[int]
    hbm_used_mb: Optional[int]
    hbm_total_mb: Optional[int]
    bus_id: Optional[str]


@dataclass(frozen=True)
class NpuProcess:
    npu: int
    chip: int
    pid: int
    name: str
    memory_mb: int


@dataclass(frozen=True)
class NpuObservation:
    version: Optional[str]
    chips: Tuple[NpuChip, ...]
    processes: Tuple[NpuProcess, ...]
    #: Health error codes from `npu-smi info -t health` for chips that are not OK: (npu, chip) -> codes.
    health_codes: Dict[Tuple[int, int], List[str]] = field(default_factory=dict)
    duration_seconds: float = 0.0
    #: Chips seen by earlier rounds of this daemon and absent now, with their last reading (掉卡).
    missing: Tuple[NpuChip, ...] = ()
    #: `npu-smi info -m`: chip logic id (the device id of plogs, the driver and torch_npu) ->
    #: (NPU ID, chip). Empty until the mapping could be read once.
    chip_map: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    #: Discovery feeds the probe and npu-smi is not on this node (yet) while no training job
    #: runs: nothing to see, and not a fault (with a job, the probe reports `npu_smi_missing`).
    absent: bool = False
    #: In one job's view (watchdog.detectors.jobs): every chip npu-smi shows on the node, so a
    #: chip that only changed hands (a job restarting) is never taken for a lost one. None: the
    #: whole node's observation (`chips` is all of them).
    node_chips: Optional[FrozenSet[Tuple[int, int]]] = None
    #: False when the table has no process table at all (npu-smi 22.x and older, 310B boards):
    #: then `processes` is empty because nobody knows, not because no process holds a chip.
    processes_known: bool = True


#: The npu probe's records.
NPU: RecordKey[NpuObservation] = RecordKey("npu")


# --- log probe -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LogEvent:
    source: str
    path: str
    line_no: Optional[int]
    rule: str
    category: str
    severity: str
    role: str
    text: str
    time: float
    lines: Tuple[str, ...] = ()
    #: Device (chip logic id) the line names, e.g. `device_id=3` in a plog; None if it names none.
    device: Optional[int] = None


@dataclass(frozen=True)
class PaceLine:
    """A progress or phase line's pace (watchdog.parse.pace) as read: when, from which source,
    and the discovered job whose rank wrote it (None: a configured source)."""

    at: float
    source: str
    mark: PaceMark
    job: Optional[str] = None
    #: The file it was read from (a source's glob may match every rank's log): a counter goes
    #: back (a restart) only below every file's own position, not when one rank lags the others.
    stream: str = ""


@dataclass(frozen=True)
class LogObservation:
    #: Rule matches found this round (after thresholds).
    events: Tuple[LogEvent, ...]
    #: Per configured source: epoch time of the newest complete line read so far (progress signal).
    last_line_at: Dict[str, float] = field(default_factory=dict)
    #: Per configured source: complete lines read this round.
    lines_read: Dict[str, int] = field(default_factory=dict)
    #: Per configured source: epoch time of the newest progress line (an iteration/step report no
    #: failure rule matches; see watchdog.logrules.progress), kept across restarts.
    progress_at: Dict[str, float] = field(default_factory=dict)
    #: The same per discovered job (job -> source -> time): a job's stall judges its own lines,
    #: never another job's on the node (watchdog.detectors.jobs puts it in the job's view).
    job_progress_at: Dict[str, Dict[str, float]] = field(default_factory=dict)
    #: This round's pace lines, oldest first (watchdog.summaries.pace folds them per job).
    pace: Tuple[PaceLine, ...] = ()


# --- command checks ------------------------------------------------------------------------

@dataclass(frozen=True)
class CommandResult:
    name: str
    argv: Tuple[str, ...]
    returncode: Optional[int]
    timed_out: bool
    duration_seconds: float
    output_tail: str


# --- kernel probe --------------------------------------------------------------------------

#: Seconds a kernel record may precede the start of the process it names and still be about it:
#: the record's time and a process's start time count from the same boot time (/proc/stat's
#: btime), so only rounding separates them.
PID_REUSE_SLACK_S = 2.0


def kmsg_comm(name: str) -> str:
    """A process name as /dev/kmsg prints it: the kernel keeps 15 bytes (TASK_COMM_LEN) and
    escapes control bytes, bytes from 0x7f and the backslash as `\\xNN`."""
    raw = os.fsencode(name)[:15]
    return "".join(chr(b) if 0x20 <= b < 0x7f and b != 0x5c else f"\\x{b:02x}" for b in raw)


@dataclass(frozen=True)
class KernelEvent:
    """One /dev/kmsg record a kernel rule matched."""

    seq: int
    #: Epoch seconds of the record (boot time + its monotonic timestamp).
    time: float
    rule: str
    category: str
    severity: str
    title: str
    #: The record's message, cut to a bounded length.
    text: str
    hint: str = ""
    #: The process the record names (killed, faulting, hung), when the rule knows how to find it.
    pid: Optional[int] = None
    #: The device (chip logic id) the record names, e.g. `devid=1` of a driver line.
    device: Optional[int] = None
    #: The discovered job, rank and NPU of `pid` when it was a rank as the record was read.
    job: Optional[str] = None
    rank: Optional[int] = None
    npu: Optional[int] = None
    #: The command name the record gives for `pid`, as /dev/kmsg prints it (None: the rule
    #: does not say where it is).
    comm: Optional[str] = None

    def names(self, comms: Iterable[str]) -> bool:
        """Whether the record's command name is one of `comms` (the names the process holding
        the pid was seen with; empty: not known). Any user can name a process `python3[4242] `
        or run one named like a rank: a record names a rank only when its pid and its command
        name are the rank's. Unknown on either side, the pid alone decides (as `about` bounds it)."""
        known = [c for c in comms if c]
        if self.comm is None or not known:
            return True
        return any(self.comm == kmsg_comm(c) for c in known)

    def about(self, started_at: Optional[float]) -> bool:
        """Whether this record can be about the process now holding its pid, which started at
        `started_at` (None: unknown). A record written before that process started names an
        earlier process that had the same pid (pids are reused, within minutes where pid_max is
        32768), never this one."""
        return started_at is None or self.time >= started_at - PID_REUSE_SLACK_S


@dataclass(frozen=True)
class KernelObservation:
    #: Matches read this round.
    events: Tuple[KernelEvent, ...] = ()
    #: Matches of the last `hold` (newest last, bounded), kept across restarts with the read position.
    recent: Tuple[KernelEvent, ...] = ()
    records_total: int = 0
    matches_total: Dict[str, int] = field(default_factory=dict)
    #: Records the kernel overwrote before they were read (EPIPE or a sequence gap, also across a
    #: restart of the daemon), and records not in the /dev/kmsg format.
    lost_total: int = 0
    malformed_total: int = 0
    last_seq: Optional[int] = None
    #: Why the read position cannot be saved (None when the last save worked).
    state_error: Optional[str] = None


#: The kernel probe's records.
KERNEL: RecordKey[KernelObservation] = RecordKey("kernel")

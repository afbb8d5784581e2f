"""The fused stall rule: one grouped finding per job when the job has stopped moving.

A heartbeat-silence-only rule is wrong most of the time (checkpoints, eval, idle instances), and
HCCL's own timeout reports a hung collective only after ~30 minutes. So a stall is called only
when independent signals agree for a phase-dependent duration of wall time:

    no progress      no heartbeat step/phase change and no progress line in the training log
                     (an iteration/step report no failure rule matches)
    AND no device activity   every job chip idle (AI Core < 5 %) or pegged, with HBM unchanged
    AND quiet CPU    every rank process below a CPU-seconds-per-second rate

A source that is not configured is left out of the AND; one whose probe is down makes the rule
abstain (a blind watcher does not call a stall; probe_down says it is blind). The process probe
alone is too weak to call a stall: at least progress or device evidence must take part.

The finding carries a classification of what was seen (collective_hang, single_device,
single_rank, busy_hang) with the matching hint, and clears by itself when progress resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from watchdog.config.schema import Config
from watchdog.detectors.series import (
    DONE_PHASE,
    MIB,
    ChipKey,
    RankProgress,
    blind_reason,
    chip_memory_mb,
    cpu_state,
    fmt_age,
    heartbeat_progress,
    job_chips,
    job_phase,
    job_progress,
    live_ranks,
    probe_configured,
)
from watchdog.detectors.cause import explain
from watchdog.detectors.jobs import per_job
from watchdog.core.findings import Finding
from watchdog.core.rulecatalog import Inhibits, Rule, detail, probe_wait
from watchdog.core.state import StateView
from watchdog.summaries import summary_of
from watchdog.summaries.npu import Summary as NpuSummary

#: Process states that set one rank apart from ranks waiting normally in a collective.
ODD_PROCESS_STATES = ("disk-sleep", "stopped", "tracing-stop", "zombie")

HINTS = {
    "collective_hang": (
        "All of the job's NPUs went idle together and no rank makes progress: typically a collective "
        "(HCCL) waiting for a peer that never arrives, i.e. a rank on another node that hung or died, "
        "or a network link fault. HCCL itself reports this only after HCCL_EXEC_TIMEOUT (default "
        "1836 s). First check: grep the plog for `Entry-` on every node (e.g. `grep -r 'Entry-' "
        "~/ascend/log/debug/plog/ | tail`) to find the rank that never entered the last collective; "
        "look at the other nodes' watchdogs and link state (`hccn_tool -i <dev> -link -g`); then "
        "restart from the last checkpoint."
    ),
    "single_device": (
        "One NPU behaves unlike the others (pegged while they wait, idle while they spin, or "
        "unhealthy): the other ranks are most likely blocked in a collective waiting for it. First "
        "check: `npu-smi info -t health -i <npu>`, the plog and device log of the rank on that "
        "device for AI Core or memory errors; take a stack of its process (`py-spy dump --pid <pid>`)."
    ),
    "single_rank": (
        "One rank is unlike the others (its step is behind, or its process is in D/T/Z state): the "
        "others wait for it in a collective. First check: `py-spy dump --pid <pid>` of that rank; a D "
        "state points at a driver or filesystem call (`cat /proc/<pid>/stack`, `dmesg`), a stopped "
        "one at a debugger or a SIGSTOP."
    ),
    "busy_hang": (
        "The NPUs are pegged near 100 % with unchanged memory while no step completes and the host "
        "side is idle: an operator or kernel stuck in a loop. First check: the plog for AI Core "
        "timeouts/exceptions (507014, 507015, EZ codes) and the last operator launched; take a stack "
        "with `py-spy dump --pid <pid>`; restart from the last checkpoint."
    ),
}


@dataclass(frozen=True)
class DeviceState:
    key: ChipKey
    #: idle, pegged, active (vetoes the stall) or unknown (no AI Core reading: left out)
    state: str
    since: Optional[float]
    util: Optional[float]
    hbm_used_mb: Optional[int]
    health: str

    def to_dict(self) -> Dict[str, Any]:
        return {"npu": self.key[0], "chip": self.key[1], "state": self.state,
                "aicore_util_pct": self.util, "hbm_used_mb": self.hbm_used_mb, "health": self.health}


@dataclass(frozen=True)
class RankState:
    rank: Optional[int]
    pid: Optional[int]
    step: Optional[int] = None
    phase: Optional[str] = None
    process_state: Optional[str] = None
    cpu_rate: Optional[float] = None

    @property
    def name(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    def to_dict(self) -> Dict[str, Any]:
        return {"rank": self.rank, "pid": self.pid, "step": self.step, "phase": self.phase,
                "state": self.process_state,
                "cpu_rate": None if self.cpu_rate is None else round(self.cpu_rate, 4)}


@dataclass(frozen=True)
class StallAssessment:
    """Everything the stall rule concluded; the detector and the metrics both read it."""

    stalled: bool
    #: Why the job is not (or cannot be judged) stalled, for status output and tests.
    reason: str = ""
    phase: Optional[str] = None
    threshold: Optional[float] = None
    #: Start of the stretch in which every evidence source was quiet.
    since: Optional[float] = None
    progress_at: Optional[float] = None
    sources: Tuple[str, ...] = ()
    classification: Optional[str] = None
    suspects: Tuple[str, ...] = ()
    devices: Tuple[DeviceState, ...] = ()
    ranks: Tuple[RankState, ...] = ()


def _device_states(view: StateView, config: Config) -> List[DeviceState]:
    sc = config.stall
    summary: NpuSummary = summary_of(view, "npu", config)
    if summary.latest is None:
        return []  # no npu-smi round folded yet: no device evidence either way
    latest = summary.latest.value
    chips = job_chips(latest, config.trends.npus, live_ranks(view))
    tol_mb = sc.hbm_tolerance / MIB
    out = []
    for key in sorted(chips):
        track = summary.chips[key]
        last = track.last
        if last is None:  # never: a chip's track is made by its first round (ChipTrack.add)
            continue
        mem = chip_memory_mb(last)
        ref = mem[0] if mem else None
        if last.aicore_util_pct is None:
            out.append(DeviceState(key, "unknown", None, None, ref, last.health))
            continue
        idle = track.steady_since(True, tol_mb, sc.idle_below_pct, sc.busy_above_pct)
        pegged = track.steady_since(False, tol_mb, sc.idle_below_pct, sc.busy_above_pct)
        if idle is not None:
            out.append(DeviceState(key, "idle", idle, last.aicore_util_pct, ref, last.health))
        elif pegged is not None:
            out.append(DeviceState(key, "pegged", pegged, last.aicore_util_pct, ref, last.health))
        else:
            out.append(DeviceState(key, "active", None, last.aicore_util_pct, ref, last.health))
    return out


def _rank_states(ranks: Dict[Any, RankProgress], procs: Dict[int, Tuple[Optional[int], str]],
                 rates: Dict[int, Optional[float]]) -> List[RankState]:
    out: Dict[Any, RankState] = {}
    for key, r in ranks.items():
        out[key] = RankState(r.key if isinstance(r.key, int) else None, None, r.step, r.phase)
    for pid, (rank, state) in procs.items():
        key = rank if rank is not None else f"pid:{pid}"
        prev = out.get(key, RankState(rank, None))
        out[key] = RankState(prev.rank, pid, prev.step, prev.phase, state, rates.get(pid))
    return sorted(out.values(), key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid or 0))


def _odd_rank(ranks: List[RankState], behind_steps: int = 1) -> Optional[Tuple[RankState, str]]:
    """The one rank unlike the rest, if exactly one is: in D/T/Z state, or with its step at least
    `behind_steps` behind the others'."""
    if len(ranks) < 2:
        return None
    odd = [r for r in ranks if r.process_state in ODD_PROCESS_STATES]
    if len(odd) == 1:
        return odd[0], f"process state {odd[0].process_state}"
    stepped = [r for r in ranks if r.step is not None]
    if len(stepped) >= 2:
        top = max(r.step for r in stepped)  # type: ignore[type-var]
        behind = [r for r in stepped if r.step <= top - behind_steps]  # type: ignore[operator]
        if len(behind) == 1:
            return behind[0], f"step {behind[0].step} while the others are at {top}"
    return None


def _classify(devices: List[DeviceState], ranks: List[RankState],
              behind_steps: int = 1) -> Tuple[str, Tuple[str, ...]]:
    name = lambda d: f"npu {d.key[0]} chip {d.key[1]}"  # noqa: E731
    pegged = [d for d in devices if d.state == "pegged"]
    idle = [d for d in devices if d.state == "idle"]
    if pegged and not idle:
        return "busy_hang", tuple(name(d) for d in pegged)
    if pegged and idle:
        if len(pegged) == 1:
            return "single_device", (name(pegged[0]) + " (pegged while the others are idle)",)
        if len(idle) == 1 and len(devices) >= 3:
            return "single_device", (name(idle[0]) + " (idle while the others are pegged)",)
        return "busy_hang", tuple(name(d) for d in pegged)
    unhealthy = [d for d in idle if (d.health or "").strip().upper() != "OK"]
    if len(unhealthy) == 1 and len(idle) >= 2:
        return "single_device", (f"{name(unhealthy[0])} (health {unhealthy[0].health})",)
    odd = _odd_rank(ranks, behind_steps)
    if odd is not None:
        return "single_rank", (f"{odd[0].name} ({odd[1]})",)
    if len(idle) <= 1 and len(ranks) <= 1:
        # One device, one process: there is no collective to hang in; the rank itself is stuck.
        who = ranks[0].name if ranks else (name(idle[0]) if idle else "the job")
        return "single_rank", (who,)
    return "collective_hang", ()


def assess(view: StateView, config: Config) -> StallAssessment:
    """Judge the job now. Pure: the same view and config always give the same answer (computed
    once per view: the detector and the metrics of one pass share it)."""
    return view.once(("stall.assess", id(config)), lambda: _assess(view, config))


def _assess(view: StateView, config: Config) -> StallAssessment:
    sc = config.stall
    if not sc.enabled:
        return StallAssessment(False, "stall rule disabled")
    hb_ranks = heartbeat_progress(view, config) if probe_configured(config, "heartbeat") else {}
    phase, threshold = job_phase(hb_ranks, sc.phases, sc.duration)
    if phase == DONE_PHASE or threshold is None:
        return StallAssessment(False, "the job reports phase done", phase=DONE_PHASE)

    for probe in SOURCES:
        if probe_configured(config, probe, view):
            reason = blind_reason(view, probe)
            if reason:
                return StallAssessment(False, f"cannot judge: {reason}", phase, threshold)

    sinces: List[float] = []
    sources: List[str] = []
    progress_at: Optional[float] = None
    if probe_configured(config, "heartbeat") or probe_configured(config, "logs"):
        progress = job_progress(view, config)
        if progress.at is None:
            return StallAssessment(False, "no progress data yet (heartbeat files / log lines)", phase, threshold)
        progress_at = progress.at
        sinces.append(progress.at)
        sources.extend(progress.sources)

    devices: List[DeviceState] = []
    if probe_configured(config, "npu", view):
        devices = [d for d in _device_states(view, config) if d.state != "unknown"]
        active = [d for d in devices if d.state == "active"]
        if active:
            return StallAssessment(False, "device activity on the job's NPUs", phase, threshold,
                                   progress_at=progress_at, sources=tuple(sources), devices=tuple(devices))
        if devices:
            sinces.append(max(d.since for d in devices if d.since is not None))
            sources.append("npu")

    if not sources:
        return StallAssessment(False, "no progress or device evidence configured", phase, threshold)

    cpu = None
    if probe_configured(config, "process"):
        cpu = cpu_state(view, sc.cpu_rate_below, config)
        if not cpu.procs:
            return StallAssessment(False, "no rank processes (see the liveness findings)", phase, threshold,
                                   progress_at=progress_at, sources=tuple(sources))
        if cpu.quiet_since is None:
            return StallAssessment(False, "rank processes use CPU", phase, threshold,
                                   progress_at=progress_at, sources=tuple(sources))
        sinces.append(cpu.quiet_since)
        sources.append("process")

    since = max(sinces)
    ranks = _rank_states(hb_ranks, cpu.procs if cpu else {}, cpu.rates if cpu else {})
    if view.now - since < threshold:
        return StallAssessment(False, f"quiet for {fmt_age(view.now - since)} of {fmt_age(threshold)}",
                               phase, threshold, since, progress_at, tuple(sources),
                               devices=tuple(devices), ranks=tuple(ranks))
    classification, suspects = _classify(devices, ranks, config.stall.rank_behind_steps)
    return StallAssessment(True, "", phase, threshold, since, progress_at, tuple(sources),
                           classification, suspects, tuple(devices), tuple(ranks))


def _detect_job(view: StateView, config: Config) -> List[Finding]:
    a = assess(view, config)
    if not a.stalled or a.since is None or a.threshold is None:
        return []
    age = view.now - a.since
    what = []
    if a.progress_at is not None:
        what.append(f"no progress for {fmt_age(view.now - a.progress_at)}")
    if a.devices:
        idle = sum(1 for d in a.devices if d.state == "idle")
        pegged = len(a.devices) - idle
        what.append(f"NPU chips idle {idle}, pegged {pegged}")
    if "process" in a.sources:
        what.append("rank CPU quiet")
    suspects = f"; suspect {', '.join(a.suspects)}" if a.suspects else ""
    return [explain(view, config, Finding(
        rule="stall", severity="critical",
        summary=(f"job {config.job.name} stalled for {fmt_age(age)} ({a.classification}, phase "
                 f"{a.phase or 'unknown'}): {'; '.join(what)}{suspects}"),
        labels=dict(config.base_labels),
        hint=HINTS[a.classification or "collective_hang"],
        value=fmt_age(age), since=a.since,
        details={
            "classification": a.classification,
            "phase": a.phase,
            "threshold_seconds": a.threshold,
            "stalled_seconds": round(age, 1),
            "progress_age_seconds": None if a.progress_at is None else round(view.now - a.progress_at, 1),
            "sources": list(a.sources),
            "suspects": list(a.suspects),
            "devices": [d.to_dict() for d in a.devices],
            "ranks": [r.to_dict() for r in a.ranks],
        },
    ))]

#: The probes whose evidence the fused rule weighs (one of them blind: it cannot judge).
SOURCES = ("heartbeat", "logs", "npu", "process")
#: Probes whose rounds start a pass of this module (a log round alone does not).
TRIGGERS = ("npu", "process", "heartbeat")


def _stall_warmup(c: Config, f: dict) -> float:
    """The device and CPU evidence start afresh after a start: the threshold the stall fired with
    (its phase's duration) must pass again before the rule can call it."""
    return detail(f, "threshold_seconds", float(c.stall.duration)) + probe_wait(c, "npu", "process", "heartbeat")


RULES = (
    Rule("stall", "critical", observes=SOURCES,
         # A NaN/error line printed while the job hangs is part of the hang's page (it is shown in
         # status); still in force when the stall clears, it is sent then.
         inhibits=(Inhibits(("npu_idle", "npu_busy_hang", "npu_low_util", "log_hccl", "log_traceback", "log_nan",
                             "heartbeat_stale", "heartbeat_no_progress", "throughput_drop", "rank_straggler",
                             "job_slowdown")),),
         warmup=_stall_warmup,
         title="Training stalled"),
)


#: Discovered jobs each get their own pass (and job label); see detectors/jobs.py.
detect = per_job(_detect_job)

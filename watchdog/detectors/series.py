"""Pure functions over the state store's history, shared by the NPU trend detectors, the fused stall
rule and their metrics (one implementation, so an alert and its metric never disagree).

Everything here is measured in wall time taken from sample times, never in probe rounds: a
condition "holds for 2 minutes" when the earliest sample of its current unbroken run is at least
2 minutes old, whatever the probe interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from watchdog.config.schema import Config
from watchdog.observations import NPU, LogObservation
from watchdog.core.state import FailureReason, StateView
from watchdog.summaries import summary_of
from watchdog.summaries.npu import chip_memory_mb, job_chips, live_ranks
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG
from watchdog.probes.heartbeat import SECTION as HEARTBEAT_CONFIG
from watchdog.probes.npu import SECTION as NPU_CONFIG
from watchdog.probes.process import SECTION as PROCESS_CONFIG

__all__ = ["chip_memory_mb", "job_chips", "live_ranks"]  # shared with the detectors

T = TypeVar("T")
ChipKey = Tuple[int, int]
RankKey = Union[int, str]
MIB = 1024 * 1024

#: Phases whose heartbeat says the job is finished: nothing about it is a stall.
DONE_PHASE = "done"


# --- probe readiness ---------------------------------------------------------------------

def probe_configured(config: Config, probe: str, view: Optional[StateView] = None) -> bool:
    """Whether the user asked for this evidence source (an unconfigured one is left out). With
    the view: where discovery feeds the npu probe and the node has no npu-smi (yet), the NPUs are
    no evidence source (`npu_smi_missing` says so), rather than a blind one that silences the
    other sources."""
    if probe == "npu":
        if view is not None and config.fed_by_discovery("npu") and npu_smi_absent(view):
            return False
        return bool(NPU_CONFIG.of(config).enabled)
    if probe == "process":
        return bool(PROCESS_CONFIG.of(config).enabled)
    if probe == "heartbeat":
        hb = HEARTBEAT_CONFIG.of(config)
        return bool(hb.enabled and (hb.paths or config.fed_by_discovery("heartbeat")))
    if probe == "logs":
        logs = LOGS_CONFIG.of(config)
        return bool(logs.enabled and (logs.sources or config.fed_by_discovery("logs")))
    return False


def npu_smi_absent(view: StateView) -> bool:
    """The npu probe finds no npu-smi program on this node: its last round said so (no job ran),
    or it is down for that reason (watchdog.npusmi.run's `missing`)."""
    status = view.status("npu")
    if status is None:
        return False
    if not status.up:
        return not status.hung and status.reason is FailureReason.MISSING
    sample = view.latest(NPU)
    return sample is not None and sample.value.absent


def blind_reason(view: StateView, probe: str) -> Optional[str]:
    """None when the probe currently observes; else why its data must not be trusted.

    A probe that is down (or not yet run) is *blind*, which is different from "saw nothing": stale
    data from before it went down must never be read as "no activity".
    """
    status = view.status(probe)
    if status is None:
        return f"probe {probe} is not running"
    if not status.up:
        return f"probe {probe} is down"
    latest = view.latest(probe)
    if latest is None:
        return f"probe {probe} has no observation yet"
    npu = view.latest(NPU) if probe == NPU else None  # the one probe whose program may be missing
    if npu is not None and npu.value.absent:
        return f"probe {probe}: its program is not on this node"
    return None


# --- generic run / regression functions ----------------------------------------------------


def window_points(points: Sequence[Tuple[float, T]], start: float) -> Tuple[List[Tuple[float, T]], bool]:
    """Points from the last one at or before `start` onwards, and whether the history reaches back
    to `start` (without that, a window-long judgement is not yet possible)."""
    idx = 0
    covered = False
    for i, (t, _) in enumerate(points):
        if t <= start:
            idx = i
            covered = True
        else:
            break
    return list(points[idx:]), covered


def linear_slope(points: Sequence[Tuple[float, float]]) -> Optional[float]:
    """Least-squares slope (units per second); None for fewer than two distinct times."""
    n = len(points)
    if n < 2:
        return None
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    if den <= 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in points) / den


def max_drawdown(values: Sequence[float]) -> float:
    """Largest fall from a running maximum: near 0 for monotonic or stair-step series, large for
    saw-tooth ones."""
    peak: Optional[float] = None
    worst = 0.0
    for v in values:
        peak = v if peak is None or v > peak else peak
        worst = max(worst, peak - v)
    return worst


# --- heartbeat phase and progress -----------------------------------------------------------

@dataclass(frozen=True)
class RankProgress:
    """What the heartbeat history says about one rank."""

    key: RankKey
    step: Optional[int]
    phase: Optional[str]
    #: Last time the rank showed progress: its step or phase changed (or, for a touch-only file
    #: without `step`, the file was touched). Before any change was seen: the first sighting.
    progress_at: float
    beat_time: Optional[float]


def heartbeat_progress(view: StateView, config: Optional[Config] = None) -> Dict[RankKey, RankProgress]:
    """Per rank: current step and phase and when it last progressed (from the heartbeat summary).

    A phase change counts as progress, so leaving a 20-minute checkpoint does not look like 20
    minutes without a step. Readings that failed to parse this round are skipped (the file was
    being rewritten), never taken as a change. Ranks not read within the history are left out.
    """
    def compute() -> Dict[RankKey, RankProgress]:
        if view.latest("heartbeat") is None:
            return {}
        summary = summary_of(view, "heartbeat", config)
        oldest = view.now - (config.probes.history if config is not None else 3600.0)
        out: Dict[RankKey, RankProgress] = {}
        for key, track in summary.ranks.items():
            last = track.last
            if last is None or track.last_usable_at is None or track.last_usable_at < oldest:
                continue
            progress_at = track.progress_at
            if last.step_changed_at is not None and last.step is not None:
                # The probe's own record (kept across daemon restarts) may know an older change.
                progress_at = min(progress_at, last.step_changed_at)
            out[key] = RankProgress(key, last.step, last.phase, progress_at, last.beat_time)
        return out

    return view.once(("heartbeat_progress",), compute)


def job_phase(ranks: Dict[RankKey, RankProgress], phase_durations: Dict[str, float],
              default: float) -> Tuple[Optional[str], Optional[float]]:
    """(phase, threshold seconds) for the job: the most lenient phase any rank reports.

    Only rank 0 may be writing a checkpoint while the others wait in a barrier still saying
    `train`; taking the longest threshold avoids paging for that. `done` wins only when every rank
    that reports a phase says `done` (one finished rank must not hide others hung in a final
    barrier). Threshold None means "never stalls".
    """
    phases = [r.phase for r in ranks.values() if r.phase]
    if phases and all(p == DONE_PHASE for p in phases):
        return DONE_PHASE, None
    best_phase: Optional[str] = None
    best = default
    for p in phases:
        if p == DONE_PHASE:
            continue
        d = phase_durations.get(p, default)
        if best_phase is None or d > best:
            best_phase, best = p, d
    return best_phase, best


# --- log progress --------------------------------------------------------------------------

def log_progress(view: StateView, sources: Optional[Sequence[str]], config: Optional[Config] = None) -> Optional[float]:
    """Newest time a counted log source produced a progress line (an iteration/step report no
    failure rule matches: a NaN or error line written while hung is not progress); before any,
    the time the log probe started watching (so a silent log counts from then). None without data.
    Reads the newest observation only (the probe keeps the per-source times)."""
    hist = view.history("logs")
    if not hist or not isinstance(hist[-1].value, LogObservation):
        return None
    wanted = set(sources) if sources is not None else None
    best: Optional[float] = None
    last = hist[-1]
    for src, at in last.value.progress_at.items():
        if wanted is None or src in wanted:
            at = min(at, last.time)
            best = at if best is None else max(best, at)
    if best is not None:
        return best
    first = summary_of(view, "logs", config).first_at  # the daemon keeps minutes of samples, not hours
    return first if first is not None else hist[0].time


# --- process CPU -----------------------------------------------------------------------------

@dataclass(frozen=True)
class CpuState:
    """How much CPU the rank processes burn, from the process probe's history."""

    #: Start of the unbroken run of rounds in which every rank stayed below the rate; None if the
    #: latest round was not quiet (or had no processes, or a first sighting without a delta).
    quiet_since: Optional[float]
    #: Latest per-process rate (CPU seconds per wall second), keyed by pid.
    rates: Dict[int, Optional[float]] = field(default_factory=dict)
    #: pid -> (rank, state) at the latest round.
    procs: Dict[int, Tuple[Optional[int], str]] = field(default_factory=dict)


def cpu_state(view: StateView, rate_below: float, config: Optional[Config] = None) -> CpuState:
    summary = summary_of(view, "process", config)
    if len(summary.rounds) == 0:
        return CpuState(None)
    return CpuState(summary.quiet_since(rate_below), dict(summary.rates), dict(summary.procs))


def fmt_age(seconds: float) -> str:
    """Short human duration for summaries (`2m05s`, `1h03m`)."""
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


# --- job progress (heartbeat + logs) ----------------------------------------------------------

@dataclass(frozen=True)
class Progress:
    """When the job last showed progress, from the configured progress sources."""

    #: Newest progress time over the usable sources; None when no source can tell.
    at: Optional[float]
    #: Sources that contributed ("heartbeat", "logs").
    sources: Tuple[str, ...] = ()
    #: Configured sources that are blind right now (their probe is down).
    blind: Tuple[str, ...] = ()
    ranks: Dict[RankKey, RankProgress] = field(default_factory=dict)


def job_progress(view: StateView, config: Config) -> Progress:
    """"No progress" means no heartbeat step advance AND no progress line in the log: the job's
    progress time is the newest over the configured sources. A configured source whose probe is
    down makes the answer unknown (at=None): a blind watcher cannot claim "no progress"."""
    return view.once(("job_progress", id(config)), lambda: _job_progress(view, config))


def _job_progress(view: StateView, config: Config) -> Progress:
    times: List[float] = []
    sources: List[str] = []
    blind: List[str] = []
    ranks: Dict[RankKey, RankProgress] = {}
    if probe_configured(config, "heartbeat"):
        reason = blind_reason(view, "heartbeat")
        if reason:
            blind.append(reason)
        else:
            ranks = heartbeat_progress(view, config)
            if ranks:
                times.append(max(r.progress_at for r in ranks.values()))
                sources.append("heartbeat")
    if probe_configured(config, "logs"):
        reason = blind_reason(view, "logs")
        if reason:
            blind.append(reason)
        else:
            at = log_progress(view, config.stall.log_sources, config)
            if at is not None:
                times.append(at)
                sources.append("logs")
    if blind or not times:
        return Progress(None, tuple(sources), tuple(blind), ranks)
    return Progress(max(times), tuple(sources), (), ranks)

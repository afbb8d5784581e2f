"""NPU trend detectors: pure functions over the npu probe's history (plus the heartbeat phase and
the progress signals the fused stall rule also uses).

Rules: `npu_idle`, `npu_busy_hang`, `npu_low_util`, `hbm_growth`, `npu_unhealthy`, `npu_missing`,
`npu_temperature`; one finding per chip, labelled host, npu, chip and the job that holds the chip
(where discovery finds the jobs, each job's pass sees its own chips and a last pass the chips no
job holds, without a job label: see watchdog.detectors.jobs). Every duration is wall time
between sample times. While the npu probe is down nothing here fires: stale readings are not
evidence (probe_down reports the blindness).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import AbstractSet, Dict, List, Optional, Sequence, Tuple

from watchdog.config.schema import Config
from watchdog.config.sections.trends import TrendsConfig
from watchdog.detectors.series import (
    DONE_PHASE,
    MIB,
    ChipKey,
    blind_reason,
    fmt_age,
    heartbeat_progress,
    job_phase,
    job_progress,
    linear_slope,
    max_drawdown,
    window_points,
)
from watchdog.detectors.jobs import per_job
from watchdog.core.findings import HOLDER, Finding
from watchdog.core.rulecatalog import Inhibits, Rule, probe_wait
from watchdog.detectors.healthcodes import advise_code
from watchdog.npusmi.subhealth import ACTIONS
from watchdog.observations import NpuObservation
from watchdog.core.state import StateView
from watchdog.summaries.npu import Summary as NpuSummary
from watchdog.summaries import summary_of
from watchdog.summaries.npu import ChipTrack
from watchdog.probes.npu import SECTION as NPU_CONFIG

HINT_IDLE = (
    "A training process holds this NPU but gives it no work. Likely a hang in collective "
    "communication (HCCL: a peer rank or node is gone or stuck) or in host-side code (data loading, "
    "a deadlock). First check: is a `stall` finding open for the job; take a stack of the rank "
    "(`py-spy dump --pid <pid>`) and grep the plog for `Entry-` and HCCL errors."
)
HINT_BUSY = (
    "AI Core is pegged while no training step completes: an operator or kernel stuck in a loop (or "
    "one pathologically slow op). First check: the plog for AI Core timeouts/exceptions (507014, "
    "507015, EZ codes) and the last operator launched; take a stack with `py-spy dump --pid <pid>`; "
    "restart from the last checkpoint if it does not recover."
)
HINT_LOW = (
    "The NPU waits for input most of the time: the input pipeline cannot keep up. First check: "
    "DataLoader num_workers and pin_memory, read throughput of the dataset's storage, host CPU "
    "saturation (`top`), and whether preprocessing can move to the NPU or be cached."
)
HINT_HBM = (
    "Device memory keeps rising (monotonic or in steps) instead of staying flat: a leak such as "
    "tensors kept in a list across steps (e.g. `losses.append(loss)` without `.item()`), a growing "
    "cache, or fragmentation. First check: what is accumulated per step; compare "
    "`torch.npu.memory_allocated()` over steps in the trainer. An NPU out-of-memory error follows "
    "when the prediction reaches zero."
)
HINT_HEALTH = (
    "npu-smi reports a device fault. First check: `npu-smi info -t health -i <npu>` for the codes "
    "and look them up in the Ascend health-code table, `dmesg` and the device logs "
    "(/var/log/npu/slog, ~/ascend/log/debug/device-<id>). Alarm or Critical on a card usually means "
    "the job cannot continue on it: drain the node and reset or replace the card."
)
HINT_MISSING = (
    "A chip that npu-smi listed before is gone (掉卡: card dropped off the bus, driver lost it, or "
    "the device wedged). The job on it cannot continue. First check: `npu-smi info`, `lspci | grep "
    "-i d80` (or the card's PCI id), `dmesg` for PCIe/AER or driver errors; drain the node and have "
    "the card inspected."
)
HINT_TEMP = (
    "The chip runs hot for a long time; it may throttle (slower steps) or shut down. First check: "
    "fans and airflow or the liquid-cooling loop, the data-centre inlet temperature, and whether "
    "one card is hotter than its neighbours (a failing fan or heat sink)."
)


def _labels(config: Config, key: ChipKey) -> Dict[str, str]:
    return {**config.base_labels, "npu": str(key[0]), "chip": str(key[1])}


def _chip_name(key: ChipKey) -> str:
    return f"NPU {key[0]} chip {key[1]}"


def _pids_on(obs: NpuObservation, key: ChipKey) -> List[int]:
    return sorted({p.pid for p in obs.processes if (p.npu, p.chip) == key})


def job_phase_of(view: StateView, config: Config) -> Tuple[Optional[str], Optional[float]]:
    """The job's phase and its stall threshold (see series.job_phase)."""
    return job_phase(heartbeat_progress(view, config), config.stall.phases, config.stall.duration)


def phase_window(phase: Tuple[Optional[str], Optional[float]], base: float) -> Optional[float]:
    """How long an NPU condition must hold given the heartbeat phase: `base` while training (or
    without a heartbeat), the longer stall duration of a declared phase such as `checkpoint`, and
    None (never) when the job says it is done."""
    name, threshold = phase
    if name == DONE_PHASE or threshold is None:
        return None
    if name is None or name == "train":
        return base
    return max(base, threshold)


# --- HBM trend (shared with the metrics) ---------------------------------------------------

@dataclass(frozen=True)
class HbmTrend:
    """The judgement on one chip's device memory over the window."""

    growing: bool
    used_bytes: int
    total_bytes: int
    rise_bytes: int
    drawdown_bytes: int
    slope_bytes_per_s: Optional[float]
    #: Linear prediction of the seconds until the memory is full (None unless growing).
    eta_seconds: Optional[float]
    window_start: float


def hbm_trend_mb(mem_pts: Sequence[Tuple[float, Tuple[int, int]]], now: float, tc: TrendsConfig) -> Optional[HbmTrend]:
    """Judge one chip's memory series of (time, (used MB, total MB)) points; None without a full
    window of readings.

    Growth means all of: a net rise of at least `hbm_min_growth` over the window, no fall larger
    than `hbm_drop_tolerance` (a saw-tooth from the caching allocator releasing memory is normal,
    a leak never gives memory back), and a rise also in the second half of the window (a ramp at
    start-up that has levelled off is not a leak). The time until full is a least-squares line
    through the window.
    """
    start = now - tc.hbm_window
    win, covered = window_points(mem_pts, start)
    if not covered or len(win) < 3:
        return None
    used = [m[0] * MIB for _, m in win]
    total = win[-1][1][1] * MIB
    rise = used[-1] - used[0]
    drawdown = max_drawdown(used)
    mid_t = start + tc.hbm_window / 2
    mid_used = next((u for (t, _), u in zip(win, used) if t >= mid_t), used[-1])
    slope = linear_slope([(t, float(u)) for (t, _), u in zip(win, used)])
    growing = (
        rise >= tc.hbm_min_growth
        and drawdown <= tc.hbm_drop_tolerance
        and used[-1] - mid_used > tc.hbm_drop_tolerance
        and slope is not None and slope > 0
    )
    eta = max(total - used[-1], 0) / slope if growing and slope else None
    return HbmTrend(growing, used[-1], total, rise, int(drawdown), slope, eta, start)


def chip_hbm_trend(track: ChipTrack, now: float, tc: TrendsConfig) -> Optional[HbmTrend]:
    """hbm_trend_mb over one chip's memory window in its summary (`track`), recomputed only when
    the window's points change (the cache lives in the summary, the judgement here)."""
    start = now - tc.hbm_window
    w = track.mem
    w.drop_before(start, keep_one_before=True)
    covered = len(w) > 0 and w.first()[0] <= start
    key = (w.key(), covered, w.index_at(start + tc.hbm_window / 2))
    if track.hbm_cache is None or track.hbm_cache[0] != key:
        flat = _not_growing(track, covered, start, tc)
        track.hbm_cache = (key, flat if flat is not None else hbm_trend_mb(list(w.items()), now, tc))
    tr = track.hbm_cache[1]
    return replace(tr, window_start=start) if tr is not None else None


def _not_growing(track: ChipTrack, covered: bool, start: float, tc: TrendsConfig) -> Optional[HbmTrend]:
    """The judgement without walking the window when the rise alone rules growth out (the
    common case: a flat memory), else None. Only a growing chip's drawdown and slope are read
    (the rule and the ETA metric), so they are left out here (0 and None)."""
    w = track.mem
    if not covered or len(w) < 3:
        return None
    first, last = w.first()[1], w.last()[1]
    rise = (last[0] - first[0]) * MIB
    if rise >= tc.hbm_min_growth:
        return None
    return HbmTrend(False, last[0] * MIB, last[1] * MIB, rise, 0, None, None, start)


def hbm_trends(view: StateView, config: Config) -> Dict[ChipKey, HbmTrend]:
    """hbm_trend_mb for every chip present in the latest round (empty while the probe is blind)."""
    if blind_reason(view, "npu"):
        return {}
    summary: NpuSummary = summary_of(view, "npu", config)
    if summary.latest is None:
        return {}

    def compute() -> Dict[ChipKey, HbmTrend]:
        out: Dict[ChipKey, HbmTrend] = {}
        for c in summary.newest().chips:
            track = summary.chip((c.npu, c.chip))
            tr = chip_hbm_trend(track, view.now, config.trends) if track is not None else None
            if tr is not None:
                out[(c.npu, c.chip)] = tr
        return out

    return view.once(("hbm_trends", id(config)), compute)


# --- detectors ---------------------------------------------------------------------------

def _idle(view: StateView, config: Config, summary: NpuSummary, phase) -> List[Finding]:
    tc = config.trends
    window = phase_window(phase, tc.idle_for)
    if window is None:
        return []
    out = []
    latest = summary.newest()
    for key in sorted(summary.held):
        track = summary.chips[key]
        since = track.idle_since(tc.idle_below_pct)
        if since is None or view.now - since < window:
            continue
        util = track.last.aicore_util_pct if track.last is not None else None
        out.append(Finding(
            rule="npu_idle", severity="warning",
            summary=f"{_chip_name(key)}: AI Core idle ({util:.0f}%) for {fmt_age(view.now - since)} "
                    f"while a training process holds it",
            labels=_labels(config, key), hint=HINT_IDLE, value=f"{util:.0f}%", since=since,
            details={"aicore_util_pct": util, "threshold_pct": tc.idle_below_pct, "window_seconds": window,
                     "pids": _pids_on(latest, key)},
        ))
    return out


def _busy(view: StateView, config: Config, summary: NpuSummary, phase) -> List[Finding]:
    tc = config.trends
    window = phase_window(phase, tc.busy_for)
    progress = job_progress(view, config)
    if window is None or progress.at is None:
        return []  # without a progress source "busy" is just "training"
    out = []
    for key in sorted(summary.held):
        track = summary.chips[key]
        busy_since = track.busy_since(tc.busy_above_pct)
        if busy_since is None:
            continue
        since = max(busy_since, progress.at)
        if view.now - since < window:
            continue
        util = track.last.aicore_util_pct if track.last is not None else None
        out.append(Finding(
            rule="npu_busy_hang", severity="critical",
            summary=f"{_chip_name(key)}: AI Core pegged at {util:.0f}% for {fmt_age(view.now - busy_since)} "
                    f"with no progress for {fmt_age(view.now - progress.at)}",
            labels=_labels(config, key), hint=HINT_BUSY, value=f"{util:.0f}%", since=since,
            details={"aicore_util_pct": util, "threshold_pct": tc.busy_above_pct, "window_seconds": window,
                     "progress_age_seconds": view.now - progress.at, "progress_sources": progress.sources},
        ))
    return out


def _low_util(view: StateView, config: Config, summary: NpuSummary, phase) -> List[Finding]:
    tc = config.trends
    if phase[0] not in (None, "train"):
        return []
    out = []
    for key in sorted(summary.held):
        got = summary.chips[key].low_util_mean(view.now - tc.low_util_for)
        if got is None:
            continue
        mean, start, n = got
        # Below the idle line the chip is idle (npu_idle / stall), not starved.
        if not (tc.idle_below_pct <= mean < tc.low_util_below_pct):
            continue
        out.append(Finding(
            rule="npu_low_util", severity="warning",
            summary=f"{_chip_name(key)}: AI Core averaged {mean:.0f}% over {fmt_age(tc.low_util_for)} "
                    f"while training (below {tc.low_util_below_pct:.0f}%)",
            labels=_labels(config, key), hint=HINT_LOW, value=f"{mean:.0f}%", since=start,
            details={"mean_aicore_util_pct": round(mean, 1), "threshold_pct": tc.low_util_below_pct,
                     "window_seconds": tc.low_util_for, "samples": n},
        ))
    return out


def _hbm(view: StateView, config: Config) -> List[Finding]:
    tc = config.trends
    out = []
    for key, tr in sorted(hbm_trends(view, config).items()):
        if not tr.growing or tr.eta_seconds is None or tr.eta_seconds > tc.hbm_eta_warning:
            continue
        critical = tr.eta_seconds < tc.hbm_eta_critical
        gib = 1024 ** 3
        out.append(Finding(
            rule="hbm_growth", severity="critical" if critical else "warning",
            summary=f"{_chip_name(key)}: device memory grew {tr.rise_bytes / gib:.1f} GiB in "
                    f"{fmt_age(tc.hbm_window)} ({tr.used_bytes / gib:.1f}/{tr.total_bytes / gib:.1f} GiB); "
                    f"full in about {fmt_age(tr.eta_seconds)} at this rate",
            labels=_labels(config, key), hint=HINT_HBM, value=f"eta {fmt_age(tr.eta_seconds)}",
            since=tr.window_start,
            details={"used_bytes": tr.used_bytes, "total_bytes": tr.total_bytes, "rise_bytes": tr.rise_bytes,
                     "max_drop_bytes": tr.drawdown_bytes, "slope_bytes_per_second": tr.slope_bytes_per_s,
                     "eta_seconds": round(tr.eta_seconds, 1), "window_seconds": tc.hbm_window},
        ))
    return out


_HEALTH_SEVERITY = {"OK": None, "WARNING": "warning", "ALARM": "critical", "CRITICAL": "critical"}


def _health(view: StateView, config: Config, summary: NpuSummary) -> List[Finding]:
    latest = summary.newest()
    out = []
    for c in latest.chips:
        key = (c.npu, c.chip)
        health = (c.health or "").strip()
        sev = _HEALTH_SEVERITY.get(health.upper(), "warning")
        if sev is None:
            continue
        codes = list(latest.health_codes.get(key, []))
        since = summary.chips[key].unhealthy.since
        advice = [advise_code(code, health) for code in codes]
        code_text = f" (codes {', '.join(f'{c}: {a.meaning}' for c, a in zip(codes, advice))})" if codes else ""
        action = max((a.action for a in advice), key=ACTIONS.index, default=None)
        out.append(Finding(
            rule="npu_unhealthy", severity=sev,
            summary=f"{_chip_name(key)}: health {health or 'empty'}{code_text}"
                    + (f"; action: {action.replace('_', ' ')}" if action else ""),
            labels=_labels(config, key), hint=HINT_HEALTH, value=health, since=since,
            details={"health": health, "codes": codes, "name": c.name, "bus_id": c.bus_id,
                     "code_levels": {a.code: a.level for a in advice}, "action": action},
        ))
    return out


def _missing(view: StateView, config: Config, summary: NpuSummary) -> List[Finding]:
    latest = summary.newest()
    present = {(c.npu, c.chip) for c in latest.chips}
    last_seen: Dict[ChipKey, Optional[float]] = dict(summary.seen_since(view.now - config.probes.history))
    # The probe remembers vanished chips beyond the store's history (NpuObservation.missing).
    for m in latest.missing:
        last_seen.setdefault((m.npu, m.chip), None)
    on_node: AbstractSet[ChipKey] = present
    if latest.node_chips is not None:
        # A job's view: a chip may be absent from it because it changed hands (its job restarted);
        # only what the probe reports gone from npu-smi (attributed to this job) is missing.
        on_node = latest.node_chips
        last_seen = {k: v for k, v in last_seen.items() if k in {(m.npu, m.chip) for m in latest.missing}}
    out = []
    for key in sorted(k for k in last_seen if k not in on_node):
        seen_at = last_seen[key]
        out.append(Finding(
            rule="npu_missing", severity="critical",
            summary=f"{_chip_name(key)} is missing from npu-smi ({len(on_node)} chips visible)",
            labels=_labels(config, key), hint=HINT_MISSING, value="missing", since=seen_at,
            details={"last_seen": seen_at, "chips_visible": len(on_node), "chips_seen": len(last_seen)},
        ))
    return out


def _expected(view: StateView, config: Config) -> List[Finding]:
    """Fewer chips than `trends.expected_chips` on the node (seen or vanished): a node finding,
    judged once over the whole node's chips."""
    tc = config.trends
    if not tc.expected_chips:
        return []
    summary: NpuSummary = summary_of(view, "npu", config)
    if summary.latest is None:
        return []
    latest = summary.latest.value
    present = {(c.npu, c.chip) for c in latest.chips}
    known = set(summary.seen_since(view.now - config.probes.history)) | {(m.npu, m.chip) for m in latest.missing}
    if len(present | known) >= tc.expected_chips:
        return []
    return [Finding(
        rule="npu_missing", severity="critical",
        summary=f"only {len(present)} of {tc.expected_chips} expected NPU chips are visible",
        labels=dict(config.base_labels), hint=HINT_MISSING, value=f"{len(present)}/{tc.expected_chips}",
        since=summary.first_at,
        details={"chips_visible": len(present), "chips_expected": tc.expected_chips,
                 "visible": [f"{n}/{c}" for n, c in sorted(present)]},
    )]


def _temperature(view: StateView, config: Config, summary: NpuSummary) -> List[Finding]:
    tc = config.trends
    out = []
    for c in summary.newest().chips:
        track = summary.chips[(c.npu, c.chip)]
        warm = track.warm_since(tc.temperature_warning_c)
        if warm is None or view.now - warm < tc.temperature_for:
            continue
        hot = track.warm_since(tc.temperature_critical_c)
        critical = hot is not None and view.now - hot >= tc.temperature_for
        out.append(Finding(
            rule="npu_temperature", severity="critical" if critical else "warning",
            summary=f"{_chip_name((c.npu, c.chip))}: {c.temp_c:.0f} C for {fmt_age(view.now - warm)} "
                    f"(threshold {tc.temperature_critical_c if critical else tc.temperature_warning_c:.0f} C)",
            labels=_labels(config, (c.npu, c.chip)), hint=HINT_TEMP, value=f"{c.temp_c:.0f}C", since=warm,
            details={"temp_c": c.temp_c, "warning_c": tc.temperature_warning_c,
                     "critical_c": tc.temperature_critical_c, "for_seconds": tc.temperature_for},
        ))
    return out


def _detect_chips(view: StateView, config: Config) -> List[Finding]:
    """The per-chip rules over the chips of one view (a job's, the node's rest, or all)."""
    summary: NpuSummary = summary_of(view, "npu", config)
    if summary.latest is None:
        return []
    out: List[Finding] = []
    phase = job_phase_of(view, config)
    out += _idle(view, config, summary, phase)
    out += _busy(view, config, summary, phase)
    out += _low_util(view, config, summary, phase)
    out += _hbm(view, config)
    # The card's own faults stay one alert while its holder changes (Finding.context).
    hardware = _health(view, config, summary) + _missing(view, config, summary) + _temperature(view, config, summary)
    return out + [replace(f, context=HOLDER) for f in hardware]


#: Each job's chips in its own pass (its job label and heartbeat phase), then the chips no job
#: holds with the node's labels (watchdog.detectors.jobs: the one place chips are attributed).
_per_chip = per_job(_detect_chips, node_rest=True)


def detect(view: StateView, config: Config) -> List[Finding]:
    if not config.trends.enabled or blind_reason(view, "npu"):
        return []
    if summary_of(view, "npu", config).latest is None:
        return []
    return _per_chip(view, config) + _expected(view, config)

TRIGGERS = ("npu",)

_NPU = lambda c, f: probe_wait(c, "npu")  # noqa: E731
#: A lost or unhealthy card explains a stalled, idle, silent job and the rank it killed.
_CARD_SYMPTOMS = (
    Inhibits(("stall", "log_hccl", "log_traceback", "npu_idle", "npu_low_util", "npu_busy_hang", "heartbeat_stale",
              "heartbeat_no_progress", "throughput_drop", "rank_straggler", "rank_missing", "job_gone",
              "rank_zombie")),
)

RULES = (
    Rule("npu_idle", "warning", observes=("npu",),
         warmup=lambda c, f: float(c.trends.idle_for) + _NPU(c, f), title="NPU idle"),
    Rule("npu_busy_hang", "critical", observes=("npu",),
         warmup=lambda c, f: float(c.trends.busy_for) + _NPU(c, f), title="NPU busy but no progress"),
    Rule("npu_low_util", "warning", observes=("npu",),
         default_for=300.0, warmup=lambda c, f: float(c.trends.low_util_for) + _NPU(c, f), title="Low NPU utilisation"),
    Rule("hbm_growth", "critical", observes=("npu",), severities=("critical", "warning"),
         default_for=300.0, warmup=lambda c, f: float(c.trends.hbm_window), title="NPU memory growing"),
    Rule("npu_unhealthy", "critical", observes=("npu",), severities=("critical", "warning"),
         inhibits=_CARD_SYMPTOMS, warmup=lambda c, f: float(NPU_CONFIG.of(c).health_interval) + _NPU(c, f), title="NPU unhealthy"),
    Rule("npu_missing", "critical", observes=("npu",),
         inhibits=_CARD_SYMPTOMS, warmup=_NPU, title="NPU card lost"),
    Rule("npu_temperature", "critical", observes=("npu",), severities=("critical", "warning"),
         default_for=120.0, warmup=lambda c, f: float(c.trends.temperature_for) + _NPU(c, f), title="NPU too hot"),
)

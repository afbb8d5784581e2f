"""`job_slowdown`: the job steps slower than its own baseline, for a while, with the suspect.

Why: a chip 20 % slower than its peers breaks nothing, and in synchronous training it slows every
rank to its pace, so the step time alone cannot say who. The slow one shows on the device side: it
computes while its peers wait in the collective, so its AI Core stays busier than theirs over the
window (the asymmetry MindCluster and NVRx look for with code in the training script). A hot chip
(the trend detector's warning temperature) throttles, and is named too. When no chip stands out,
the whole node (or the whole job) is slower: the input pipeline, the storage, or another node the
fleet rule `job_straggler_node` names.

Pure: reads the logs summary's pace (watchdog.summaries.pace) and the npu summary's windows.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from watchdog.config.schema import Config
from watchdog.core.findings import Finding
from watchdog.core.rulecatalog import Rule, probe_wait
from watchdog.core.state import StateView
from watchdog.detectors.jobs import per_job
from watchdog.detectors.series import blind_reason, fmt_age, probe_configured
from watchdog.observations import NpuObservation, ProcessObservation
from watchdog.summaries import summary_of
from watchdog.summaries.npu import ChipTrack
from watchdog.summaries.pace import PaceTrack, PaceVerdict, median
from watchdog.words import words

ChipKey = Tuple[int, int]

HINT = (
    "The job's steps take longer than its own baseline. A suspect chip computes while its peers "
    "wait for it: check it first (`npu-smi info -t common -i <npu>` for AI Core frequency, "
    "`npu-smi info -t temp -i <npu>` and `-t power` for throttling, `npu-smi info -t health -i <npu>`), "
    "then the rank on it (`py-spy dump --pid <pid>`). With no suspect the node is uniformly slower: "
    "the data loader and its storage, host CPU, another job on the node, or a slower node of the "
    "job (the fleet alert job_straggler_node names it)."
)


@dataclass(frozen=True)
class Suspect:
    npu: int
    chip: int
    rank: Optional[int]
    why: str

    @property
    def name(self) -> str:
        rank = f" (rank {self.rank})" if self.rank is not None else ""
        return f"npu {self.npu} chip {self.chip}{rank}"


def pace_track(view: StateView, config: Config) -> Optional[PaceTrack]:
    """The job's pace: from its progress lines where it prints them, else from its heartbeats'
    steps (None: neither source runs, sees progress, or can be trusted now)."""
    for probe in ("logs", "heartbeat"):
        if not probe_configured(config, probe):
            continue
        track = summary_of(view, probe, config).pace
        if track.progress_first_at is None:
            continue
        return None if blind_reason(view, probe) else track
    return None


def verdict(view: StateView, config: Config) -> Optional[PaceVerdict]:
    """The job's pace now (None: see `pace_track`)."""
    track = pace_track(view, config)
    return track.verdict if track is not None else None


def _window_mean(track: ChipTrack, start: float) -> Optional[float]:
    """Mean AI Core % while the job held the chip since `start` (None: no reading)."""
    w = track.util
    i = bisect_left(w.times, start, w.head)
    vals = [v for v in w.values[i:] if v is not None]
    return sum(vals) / len(vals) if vals else None


def _ranks_by_chip(view: StateView) -> Dict[ChipKey, int]:
    npu = view.latest("npu")
    proc = view.latest("process")
    if proc is None or not isinstance(proc.value, ProcessObservation):
        return {}
    by_pid = {p.pid: p.rank for p in proc.value.processes if p.rank is not None}
    out: Dict[ChipKey, int] = {}
    if npu is not None and isinstance(npu.value, NpuObservation):
        for held in npu.value.processes:
            if held.pid in by_pid:
                out.setdefault((held.npu, held.chip), by_pid[held.pid])
    for p in proc.value.processes:
        if p.npu is not None and p.rank is not None:
            out.setdefault((p.npu, 0), p.rank)
    return out


def chip_means(view: StateView, config: Config, start: float) -> Dict[ChipKey, float]:
    """Mean AI Core % since `start` of each chip the job holds (empty: no trusted npu data)."""
    if not probe_configured(config, "npu", view) or blind_reason(view, "npu"):
        return {}
    summary = summary_of(view, "npu", config)
    means: Dict[ChipKey, float] = {}
    for key in sorted(summary.held):
        track = summary.chip(key)
        mean = _window_mean(track, start) if track is not None else None
        if mean is not None:
            means[key] = mean
    return means


def suspects(view: StateView, config: Config, start: float) -> Tuple[List[Suspect], Dict[str, float]]:
    """The job's chips that stand out since `start`, and every chip's mean AI Core % (evidence)."""
    means = chip_means(view, config, start)
    if not means:
        return [], {}
    summary = summary_of(view, "npu", config)
    ranks = _ranks_by_chip(view)
    out: List[Suspect] = []
    if len(means) >= 3:
        for key, mean in means.items():
            peers = median([m for k, m in means.items() if k != key])
            if mean >= peers + config.pace.busier_by_pct:
                out.append(Suspect(key[0], key[1], ranks.get(key),
                                   f"AI Core {mean:.0f}% while its peers' median is {peers:.0f}%"))
    for key in means:
        track = summary.chip(key)
        last = track.last if track is not None else None
        if last is not None and last.temp_c is not None and last.temp_c >= config.trends.temperature_warning_c \
                and all(s.npu != key[0] or s.chip != key[1] for s in out):
            out.append(Suspect(key[0], key[1], ranks.get(key), f"{last.temp_c:.0f} C: thermal throttling likely"))
    if len(out) > max(1, len(means) // 4):
        out = []  # many chips "stand out": the peers are the odd ones, or it is noise
    evidence = {f"npu {k[0]} chip {k[1]}": round(v, 1) for k, v in means.items()}
    return out, evidence


def _detect_job(view: StateView, config: Config) -> List[Finding]:
    cfg = config.pace
    v = verdict(view, config) if cfg.enabled else None
    if v is None or v.slow_since is None or v.last_at is None or v.ratio is None:
        return []
    if view.now - v.last_at > max(cfg.window, 3 * (v.recent or 0.0)):
        return []  # no steps lately: a stall, the stall rule's business
    if view.now - v.slow_since < cfg.slow_for:
        return []
    found, chips = suspects(view, config, view.now - cfg.window)
    pct = (v.ratio - 1.0) * 100.0
    if found:
        who = "; suspect " + ", ".join(f"{s.name}: {s.why}" for s in found)
        value = f"+{pct:.0f}% · " + ", ".join(s.name for s in found)
    else:
        who = "; no chip of this node stands out (AI Core alike): the cause is outside the chips"
        value = f"+{pct:.0f}%"
    return [Finding(
        rule="job_slowdown", severity="warning",
        summary=(f"job {config.job.name} steps {pct:.0f}% slower than its baseline "
                 f"({v.recent:.3g} s vs {v.baseline:.3g} s per step) for {fmt_age(view.now - v.slow_since)}{who}"),
        labels=dict(config.base_labels), hint=HINT, value=value, since=v.slow_since,
        details={"step_seconds": v.recent, "baseline_step_seconds": v.baseline,
                 "slower_pct": round(pct, 1), "steps_in_window": v.steps,
                 "suspects": [{"npu": s.npu, "chip": s.chip, "rank": s.rank, "why": s.why} for s in found],
                 "aicore_mean_pct": chips},
    )]


TRIGGERS = ("logs", "heartbeat", "npu")


def _warmup(c: Config, f: dict) -> float:
    """After a restart the pace needs its window again before silence means "back to normal"."""
    return float(c.pace.window + c.pace.slow_for) + probe_wait(c, "logs", "heartbeat", "npu")


RULES = (
    Rule("job_slowdown", "warning", warmup=_warmup, title="Job slower than its baseline"),
)

detect = per_job(_detect_job)


def goodput_words(view: StateView, config: Config, end_at: Optional[float],
                  clean: bool = False) -> Tuple[str, Dict[str, object]]:
    """`; goodput 83.2 % (train 25m00s of 30m02s; stalled 5m00s)` and its details, for the job's
    end message ("" and {} when no progress line was ever read). The details carry the same
    sentence in Chinese (`said`), since the Chinese message is written from the rule's template."""
    track = pace_track(view, config) if config.pace.enabled else None
    if track is None:
        return "", {}
    seconds, share = track.goodput(end_at, clean)
    if share is None:
        return "", {}
    total = sum(seconds.values())
    lost = "; ".join(f"{k} {fmt_age(v)}" for k, v in seconds.items() if k != "train" and v >= 1)
    text = f"; goodput {share * 100:.1f} % (train {fmt_age(seconds['train'])} of {fmt_age(total)}" + \
        (f"; {lost})" if lost else ")")
    return text, {"goodput_ratio": round(share, 4), "seconds": {k: round(v, 1) for k, v in seconds.items()},
                  "said": {"zh": _goodput_zh(share, seconds)}}


def _goodput_zh(share: float, seconds: Dict[str, float]) -> str:
    """The goodput sentence in Chinese: `；有效训练占比 83.2%（训练 25 分钟，共 30 分钟 2 秒；停滞 5 分钟）`."""
    zh = words("zh")
    lost = "；".join(f"{zh.t('pace_state_' + k)} {zh.duration(v)}" for k, v in seconds.items()
                    if k != "train" and v >= 1)
    return (f"；{zh.t('goodput')} {share * 100:.1f}%（{zh.t('pace_state_train')} {zh.duration(seconds['train'])}，"
            f"{zh.t('of_total')} {zh.duration(sum(seconds.values()))}" + (f"；{lost}）" if lost else "）"))

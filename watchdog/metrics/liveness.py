"""Metrics of the liveness feature: per-rank heartbeat and process series, per-job rank counts.

Per-rank series carry only `training_job` and `rank` (low cardinality); the pid and heartbeat path, which
change on every restart, live in `npu_watchdog_rank_info`. Values come from the latest stored
observations: a scrape never reads a file or a process.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

from watchdog.core.findings import JOB_LABEL
from watchdog.parse.heartbeat_format import PHASES
from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.observations import HeartbeatObservation, ProcessObservation

_JR = (JOB_LABEL, "rank")

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 20

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_heartbeat_age_seconds", "gauge", _JR,
              "Seconds since the rank's last heartbeat (JSON `time`, else file mtime)."),
    MetricDef("npu_watchdog_heartbeat_step", "gauge", _JR, "Last step the rank reported."),
    MetricDef("npu_watchdog_heartbeat_loss", "gauge", _JR, "Last loss the rank reported (NaN when it diverged)."),
    MetricDef("npu_watchdog_heartbeat_grad_norm", "gauge", _JR, "Last gradient norm the rank reported."),
    MetricDef("npu_watchdog_heartbeat_loss_scale", "gauge", _JR, "Last dynamic loss scale the rank reported."),
    MetricDef("npu_watchdog_heartbeat_tokens_per_second", "gauge", _JR,
              "Last throughput the rank reported in tokens per second (heartbeat `tokens_per_s`)."),
    MetricDef("npu_watchdog_heartbeat_samples_per_second", "gauge", _JR,
              "Last throughput the rank reported in samples per second (heartbeat `samples_per_s`, "
              "when it gives no tokens_per_s)."),
    MetricDef("npu_watchdog_heartbeat_last_timestamp_seconds", "gauge", _JR,
              "Unix time of the rank's last heartbeat (JSON `time`, else file mtime); `time() - x` is its age."),
    MetricDef("npu_watchdog_heartbeat_last_progress_timestamp_seconds", "gauge", _JR,
              "Unix time the rank's step last advanced (or its phase changed)."),
    MetricDef("npu_watchdog_heartbeat_phase", "gauge", (JOB_LABEL, "rank", "phase"),
              "1 for the rank's current phase (init, train, eval, checkpoint, done), 0 for the others."),
    MetricDef("npu_watchdog_heartbeat_last_progress_age_seconds", "gauge", _JR,
              "Seconds since the rank's step last advanced (or its phase changed)."),
    MetricDef("npu_watchdog_heartbeat_read_errors_total", "counter", _JR,
              "Heartbeat reads that found the file empty, half-written or unreadable (retried next round)."),
    MetricDef("npu_watchdog_rank_info", "gauge", (JOB_LABEL, "rank", "pid", "path"),
              "Always 1; the rank's current pid and heartbeat path (empty when unknown)."),
    MetricDef("npu_watchdog_rank_process_up", "gauge", _JR,
              "1 while the rank's process runs (not a zombie), 0 once it is gone."),
    MetricDef("npu_watchdog_rank_cpu_seconds_total", "counter", _JR,
              "CPU time (user+system) used by the rank's current process."),
    MetricDef("npu_watchdog_rank_resident_memory_bytes", "gauge", _JR, "Resident memory of the rank's process."),
    MetricDef("npu_watchdog_job_ranks_expected", "gauge", (JOB_LABEL,),
              "Ranks expected on this node (`probes.process.expected`, else the ranks seen so far)."),
    MetricDef("npu_watchdog_job_ranks_alive", "gauge", (JOB_LABEL,), "Rank processes running (zombies excluded)."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    cfg = rt.config
    job = cfg.job_label
    view = rt.state.view()
    #: (job, rank) -> pid and heartbeat path, for rank_info.
    info: Dict[Tuple[str, str], Dict[str, str]] = {}

    hb = view.latest("heartbeat")
    if cfg.probes.heartbeat.enabled and hb is not None:
        obs: HeartbeatObservation = hb.value
        for r in obs.readings:
            rank = str(r.rank) if r.rank is not None else r.path
            labels = {JOB_LABEL: r.job or job, "rank": rank}
            key = (labels[JOB_LABEL], rank)
            info.setdefault(key, {"pid": "", "path": ""})["path"] = r.path
            if r.pid is not None:
                info[key]["pid"] = str(r.pid)
            yield from _heartbeat_samples(r, labels, view.now)

    pr = view.latest("process")
    if cfg.probes.process.enabled and pr is not None:
        yield from _process_samples(pr.value, job, info)

    for (j, rank), extra in sorted(info.items()):
        yield MetricSample("npu_watchdog_rank_info", {JOB_LABEL: j, "rank": rank, **extra}, 1)


def _heartbeat_samples(r: Any, labels: Dict[str, str], now: float) -> Iterator[MetricSample]:
    yield MetricSample("npu_watchdog_heartbeat_read_errors_total", labels, r.read_errors_total)
    if r.beat_time is None:
        return  # not started yet: no age to report
    yield MetricSample("npu_watchdog_heartbeat_age_seconds", labels, max(0.0, now - r.beat_time))
    yield MetricSample("npu_watchdog_heartbeat_last_timestamp_seconds", labels, r.beat_time)
    if r.throughput is not None:
        unit = "samples" if r.throughput_unit == "samples_per_s" else "tokens"
        yield MetricSample(f"npu_watchdog_heartbeat_{unit}_per_second", labels, float(r.throughput))
    for name, value in (("step", r.step), ("loss", r.loss), ("grad_norm", r.grad_norm),
                        ("loss_scale", r.loss_scale)):
        if value is not None:
            yield MetricSample(f"npu_watchdog_heartbeat_{name}", labels, float(value))
    if r.step_changed_at is not None:
        yield MetricSample("npu_watchdog_heartbeat_last_progress_age_seconds", labels,
                           max(0.0, now - r.step_changed_at))
        yield MetricSample("npu_watchdog_heartbeat_last_progress_timestamp_seconds", labels, r.step_changed_at)
    if r.phase is not None:
        for ph in PHASES:
            yield MetricSample("npu_watchdog_heartbeat_phase", {**labels, "phase": ph}, 1 if r.phase == ph else 0)


def _process_samples(pobs: ProcessObservation, default_job: str,
                     info: Dict[Tuple[str, str], Dict[str, str]]) -> Iterator[MetricSample]:
    """Per-rank series, one per (job, rank): the probes guarantee that, and this keeps it so."""
    alive: Dict[str, int] = {}
    seen: Dict[str, set] = {}
    for p in pobs.processes:
        j, rank = p.job or default_job, str(p.rank)
        if rank in seen.setdefault(j, set()):
            continue
        seen[j].add(rank)
        labels = {JOB_LABEL: j, "rank": rank}
        up = p.state != "zombie"
        alive[j] = alive.get(j, 0) + (1 if up else 0)
        info.setdefault((j, rank), {"pid": "", "path": ""})["pid"] = str(p.pid)
        yield MetricSample("npu_watchdog_rank_process_up", labels, 1 if up else 0)
        yield MetricSample("npu_watchdog_rank_cpu_seconds_total", labels, p.cpu_seconds)
        yield MetricSample("npu_watchdog_rank_resident_memory_bytes", labels, p.rss_bytes)
    for g in pobs.gone:
        j, rank = g.job or default_job, str(g.rank)
        if rank in seen.setdefault(j, set()):
            continue
        seen[j].add(rank)
        yield MetricSample("npu_watchdog_rank_process_up", {JOB_LABEL: j, "rank": rank}, 0)
    expected_of = {js.name: js.expected for js in pobs.jobs}
    # Discovered jobs stay (alive 0 once ended) until the probe forgets them after forget_after.
    jobs = sorted(set(seen) | set(expected_of)) if pobs.discovered else [default_job]
    for j in jobs:
        expected = (expected_of.get(j) if pobs.discovered else pobs.expected) or len(seen.get(j, ()))
        yield MetricSample("npu_watchdog_job_ranks_expected", {JOB_LABEL: j}, expected)
        yield MetricSample("npu_watchdog_job_ranks_alive", {JOB_LABEL: j}, alive.get(j, 0))

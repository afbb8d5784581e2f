"""Metrics of the logs feature: rule matches, and per configured source (never per file) reads."""

from __future__ import annotations

from typing import Any, Iterator, List, Tuple

from watchdog.logrules.matcher import effective_engine
from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.probes.logs import LOGS, LogProbeObservation
from watchdog.metrics.core import node_jobs

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 50

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_log_matches_total", "counter", ("rule", "category"),
              "Log lines that matched a rule (before thresholds), since the daemon started."),
    MetricDef("npu_watchdog_job_restarts_total", "counter", ("training_job", "cause"),
              "Worker-group restarts the launcher's agent announced (torch elastic's `will restart worker group`), "
              "per training job and cause (the rule of the failure line before the restart, or unknown); "
              "kept for 24 h after a job's last restart on that cause."),
    MetricDef("npu_watchdog_log_bytes_read_total", "counter", ("source",),
              "Bytes of log read, per configured source."),
    MetricDef("npu_watchdog_log_lines_read_total", "counter", ("source",),
              "Complete log lines read, per configured source."),
    MetricDef("npu_watchdog_log_files_followed", "gauge", ("source",),
              "Files currently followed by the source's paths/globs."),
    MetricDef("npu_watchdog_log_files_polled", "gauge", ("source",),
              "Followed files beyond the descriptor budget, read by polling (opened, read and closed every round)."),
    MetricDef("npu_watchdog_log_read_lag_seconds", "gauge", ("source",),
              "How long the source's oldest unread data has been waiting (0 when caught up)."),
    MetricDef("npu_watchdog_log_rotations_total", "counter", ("source",),
              "Rotations seen: rename-and-create, copytruncate, delete and re-create."),
    MetricDef("npu_watchdog_log_read_errors_total", "counter", ("source",),
              "Files or directories of the source that could not be read (e.g. permissions); see the daemon log."),
    MetricDef("npu_watchdog_log_engine_info", "gauge", ("engine",),
              "Always 1; the regular-expression engine the log rules run on: re2 (fast) or re (the slow fallback)."),
    MetricDef("npu_watchdog_log_unreadable_paths", "gauge", ("source",),
              "Files or directories of the source that cannot be read now (log_unreadable finding)."),
    MetricDef("npu_watchdog_log_offsets_save_errors_total", "counter", (),
              "Rounds whose log read offsets could not be saved (state folder read-only or full)."),
    MetricDef("npu_watchdog_log_offsets_saved", "gauge", (),
              "1 if the last save of the log read offsets succeeded, else 0 (log_offsets_unsaved finding)."),
]

_cache: Tuple[Any, tuple] = (None, ())


def _rules(cfg: Any) -> tuple:
    """The configured rule set, rebuilt only when the config object changes (reload)."""
    global _cache
    if _cache[0] is not cfg:
        _cache = (cfg, tuple((r.id, r.category) for r in cfg.ruleset()))
    return _cache[1]


def samples(rt: Any) -> Iterator[MetricSample]:
    cfg = rt.config.probes.logs
    yield MetricSample("npu_watchdog_log_engine_info", {"engine": effective_engine(cfg.engine)}, 1)
    sample = rt.state.latest(LOGS)
    obs = sample.value if sample is not None else LogProbeObservation(events=())  # before the first round
    # Discovered jobs' restarts too (their logs are not configured sources).
    counted = set()
    for r in obs.restarts:
        job = r.job or rt.config.base_labels.get("training_job", "")
        counted.add(job)
        yield MetricSample("npu_watchdog_job_restarts_total", {"training_job": job, "cause": r.cause}, r.count)
    for job in node_jobs(rt):  # every job's series starts at zero (cause "none")
        if job not in counted:
            yield MetricSample("npu_watchdog_job_restarts_total", {"training_job": job, "cause": "none"}, 0)
    if not cfg.enabled or not cfg.sources:
        return
    matches = obs.matches_total
    for rid, category in _rules(cfg):
        yield MetricSample("npu_watchdog_log_matches_total", {"rule": rid, "category": category},
                           matches.get(rid, 0))
    yield MetricSample("npu_watchdog_log_offsets_save_errors_total", {},
                       obs.state_save_errors_total)
    yield MetricSample("npu_watchdog_log_offsets_saved", {}, 0 if obs.state_error else 1)
    unreadable = obs.unreadable
    sources = obs.sources
    for src in cfg.sources:
        s = sources.get(src.name)
        lab = {"source": src.name}
        yield MetricSample("npu_watchdog_log_bytes_read_total", lab, s.bytes_total if s else 0)
        yield MetricSample("npu_watchdog_log_lines_read_total", lab, s.lines_total if s else 0)
        yield MetricSample("npu_watchdog_log_files_followed", lab, s.files_followed if s else 0)
        yield MetricSample("npu_watchdog_log_files_polled", lab, s.files_polled if s else 0)
        yield MetricSample("npu_watchdog_log_read_lag_seconds", lab, s.read_lag_seconds if s else 0)
        yield MetricSample("npu_watchdog_log_rotations_total", lab, s.rotations_total if s else 0)
        yield MetricSample("npu_watchdog_log_read_errors_total", lab, s.read_errors_total if s else 0)
        yield MetricSample("npu_watchdog_log_unreadable_paths", lab, len(unreadable.get(src.name, ())))

"""Self-metrics: build info, probe health, findings in force, reloads."""

from __future__ import annotations

import platform
from typing import Any, Iterator, List

from watchdog import __version__
from watchdog.core.findings import JOB_LABEL, SEVERITIES
from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.release import commit

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 10

METRICS = [
    MetricDef("npu_watchdog_build_info", "gauge", ("version", "commit", "python"),
              "Always 1; the daemon's version, the commit it was built from (`unknown` if not known) "
              "and Python version."),
    MetricDef("npu_watchdog_node_info", "gauge", ("host", JOB_LABEL),
              "Always 1; the node and the training job(s) this daemon watches, one series per job (join on "
              "`instance` across the fleet): the configured job, else each job discovery finds on the node; "
              "training_job is empty only on a node with no job."),
    MetricDef("npu_watchdog_start_time_seconds", "gauge", (),
              "Unix time the daemon started."),
    MetricDef("npu_watchdog_probe_up", "gauge", ("probe",),
              "1 if the probe's last round observed successfully, 0 if it failed, timed out or has not run."),
    MetricDef("npu_watchdog_probe_duration_seconds", "gauge", ("probe",),
              "Duration of the probe's last round."),
    MetricDef("npu_watchdog_probe_runs_total", "counter", ("probe",),
              "Probe rounds started."),
    MetricDef("npu_watchdog_probe_errors_total", "counter", ("probe",),
              "Probe rounds that failed (exception, timeout, or previous round still hung)."),
    MetricDef("npu_watchdog_probe_timeouts_total", "counter", ("probe",),
              "Probe rounds abandoned after their timeout."),
    MetricDef("npu_watchdog_probe_last_success_timestamp_seconds", "gauge", ("probe",),
              "Unix time of the probe's last successful round (0 if never)."),
    MetricDef("npu_watchdog_findings", "gauge", ("severity",),
              "Findings in force after the last detector pass, by severity."),
    MetricDef("npu_watchdog_detector_errors_total", "counter", (),
              "Detector passes in which a detector raised (see the daemon log)."),
    MetricDef("npu_watchdog_config_reloads_total", "counter", ("result",),
              "Config reloads by result (success, failure)."),
    MetricDef("npu_watchdog_config_last_reload_success_timestamp_seconds", "gauge", (),
              "Unix time the running config was loaded."),
]


def node_jobs(rt: Any) -> List[str]:
    """The training jobs this node runs now: the configured job, else the jobs the last discovery
    scan found. A dashboard's job variable and the fleet rules select a node by these names, so
    on the discovery path they must be the discovered ones, not an empty label."""
    if rt.config.job_label:
        return [rt.config.job_label]
    feed = rt.discovery
    found = feed.latest() if feed is not None else None
    return sorted({j.name for j in found.jobs if j.name}) if found is not None else []


def samples(rt: Any) -> Iterator[MetricSample]:
    cfg = rt.config
    yield MetricSample("npu_watchdog_build_info", {"version": __version__, "commit": commit(),
                                                 "python": platform.python_version()}, 1)
    for job in node_jobs(rt) or [""]:
        yield MetricSample("npu_watchdog_node_info", {"host": cfg.node.name, JOB_LABEL: job}, 1)
    yield MetricSample("npu_watchdog_start_time_seconds", {}, rt.started_at)
    for st in rt.state.statuses():
        p = {"probe": st.name}
        yield MetricSample("npu_watchdog_probe_up", p, 1 if st.up else 0)
        yield MetricSample("npu_watchdog_probe_duration_seconds", p, st.last_duration or 0.0)
        yield MetricSample("npu_watchdog_probe_runs_total", p, st.runs_total)
        yield MetricSample("npu_watchdog_probe_errors_total", p, st.errors_total)
        yield MetricSample("npu_watchdog_probe_timeouts_total", p, st.timeouts_total)
        yield MetricSample("npu_watchdog_probe_last_success_timestamp_seconds", p, st.last_success or 0)
    counts = {s: 0 for s in SEVERITIES}
    for f in rt.engine.current():
        counts[f.severity] += 1
    for sev, n in counts.items():
        yield MetricSample("npu_watchdog_findings", {"severity": sev}, n)
    yield MetricSample("npu_watchdog_detector_errors_total", {}, rt.counters.get("detector_errors", 0))
    for result in ("success", "failure"):
        yield MetricSample("npu_watchdog_config_reloads_total", {"result": result},
                           rt.counters.get(f"reload_{result}", 0))
    yield MetricSample("npu_watchdog_config_last_reload_success_timestamp_seconds", {}, rt.config_loaded_at)

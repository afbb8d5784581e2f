"""Metrics of the job pace and its goodput (watchdog.summaries.pace, watchdog.detectors.pace).

Computed once per detector pass from the very summaries the `job_slowdown` rule reads, so a graph
and an alert never disagree. The fleet rules compare a job's nodes with them
(contrib/prometheus/npu-watchdog.rules.yml: `job_straggler_node`): in synchronous training every
node steps at the same pace, so the slow node shows by its chips being busier than the others'.
"""

from __future__ import annotations

from typing import Any, Iterator, List

from watchdog.config.schema import Config
from watchdog.core.findings import JOB_LABEL
from watchdog.core.state import StateView
from watchdog.detectors.jobs import job_passes
from watchdog.detectors.pace import chip_means, pace_track
from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.summaries.pace import STATES

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 45

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_job_step_seconds", "gauge", (JOB_LABEL,),
              "Median step time over pace.window, from the progress lines the trainer prints (its own "
              "step time where it prints one, else the time between lines over the steps between them; "
              "without progress lines, the rate of the heartbeats' step)."),
    MetricDef("npu_watchdog_job_step_baseline_seconds", "gauge", (JOB_LABEL,),
              "The job's own baseline step time: the median of the window medians over pace.baseline, "
              "past pace.warmup, without the windows judged slow."),
    MetricDef("npu_watchdog_job_slowdown_ratio", "gauge", (JOB_LABEL,),
              "Step time over its baseline (1.2: 20 % slower); job_slowdown fires at 1 + "
              "pace.slower_by_pct/100 held for pace.slow_for."),
    MetricDef("npu_watchdog_job_aicore_busy_ratio", "gauge", (JOB_LABEL,),
              "Mean AI Core use (0-1) of the job's chips on this node over pace.window: the fleet rule "
              "names the node whose chips are busier than the job's other nodes' while the job is slow."),
    MetricDef("npu_watchdog_job_time_seconds_total", "counter", (JOB_LABEL, "state"),
              "Wall time of the job on this node booked per state: train, starting, checkpoint, eval, "
              "stalled, restarting, recompute (steps done again after a restart). Goodput is the train "
              "share."),
    MetricDef("npu_watchdog_job_goodput_ratio", "gauge", (JOB_LABEL,),
              "The share of the job's wall time booked to train (0-1), since the daemon first saw it."),
]


def evaluate(view: StateView, cfg: Config) -> List[MetricSample]:
    """The samples as of this detector pass."""
    return list(_compute(view, cfg))


def samples(rt: Any) -> Iterator[MetricSample]:
    return iter(rt.evaluated.get(__name__, ()))


def _compute(view: StateView, cfg: Config) -> Iterator[MetricSample]:
    if not cfg.pace.enabled:
        return
    for jv, jcfg in job_passes(view, cfg) or [(view, cfg)]:
        job = {JOB_LABEL: jcfg.job_label}
        if not job[JOB_LABEL]:
            continue
        track = pace_track(jv, jcfg)
        if track is None:
            continue
        v = track.verdict
        if v.recent is not None:
            yield MetricSample("npu_watchdog_job_step_seconds", job, v.recent)
        if v.baseline is not None:
            yield MetricSample("npu_watchdog_job_step_baseline_seconds", job, v.baseline)
        if v.ratio is not None:
            yield MetricSample("npu_watchdog_job_slowdown_ratio", job, round(v.ratio, 4))
        means = chip_means(jv, jcfg, jv.now - jcfg.pace.window)
        if means:
            yield MetricSample("npu_watchdog_job_aicore_busy_ratio", job,
                               round(sum(means.values()) / len(means) / 100.0, 4))
        seconds, share = track.goodput()
        for state in STATES:
            yield MetricSample("npu_watchdog_job_time_seconds_total", {**job, "state": state}, round(seconds[state], 3))
        if share is not None:
            yield MetricSample("npu_watchdog_job_goodput_ratio", job, round(share, 4))


#: Status keys of the gauges (the metric name without prefix and unit noise).
_STATUS_KEYS = {
    "npu_watchdog_job_step_seconds": "step_seconds",
    "npu_watchdog_job_step_baseline_seconds": "baseline_step_seconds",
    "npu_watchdog_job_slowdown_ratio": "slowdown_ratio",
    "npu_watchdog_job_aicore_busy_ratio": "aicore_busy_ratio",
    "npu_watchdog_job_goodput_ratio": "goodput_ratio",
}


def status_rows(evaluated: Any) -> List[dict]:
    """Per job, its pace and goodput as this pass computed them (`/api/status` key `pace`):
    the same numbers /metrics serves, never recomputed."""
    rows: dict = {}
    for s in evaluated.get(__name__, ()):
        job = s.labels.get(JOB_LABEL, "")
        row = rows.setdefault(job, {JOB_LABEL: job, "seconds": {}})
        if s.name == "npu_watchdog_job_time_seconds_total":
            row["seconds"][s.labels["state"]] = s.value
        elif s.name in _STATUS_KEYS:
            row[_STATUS_KEYS[s.name]] = s.value
    return [rows[k] for k in sorted(rows)]

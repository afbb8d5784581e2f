"""Metrics of the NPU trends and the fused stall rule.

Computed once per detector pass (`evaluate`, called by the daemon with the pass's view) with the
very functions the detectors use (`hbm_trends`, `stall.assess`, `job_progress`, shared through the
view's memo), so a graph and an alert never disagree and a scrape only copies the result: a
scrape that re-ran the detectors over an hour of history cost more than node_exporter's.
"""

from __future__ import annotations

from typing import Any, Iterator, List

from watchdog.detectors.jobs import job_passes
from watchdog.detectors.npu import hbm_trends
from watchdog.detectors.series import job_progress
from watchdog.detectors.stall import assess
from watchdog.config.schema import Config
from watchdog.core.findings import JOB_LABEL
from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.core.state import StateView

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 40

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_npu_hbm_full_eta_seconds", "gauge", ("npu", "chip"),
              "Linear prediction of the seconds until the chip's device memory is full, present only "
              "while it is judged to be growing (monotonic or stair-step rise over trends.hbm_window)."),
    MetricDef("npu_watchdog_job_stalled", "gauge", (JOB_LABEL,),
              "1 while the fused stall rule holds for the job (no progress, no device activity, quiet "
              "rank CPU for the phase's duration), else 0."),
    MetricDef("npu_watchdog_job_progress_age_seconds", "gauge", (JOB_LABEL,),
              "Seconds since the last observed progress (heartbeat step or phase change, or a progress "
              "line in a training log that no failure rule matches); absent when no progress source is "
              "configured or its probe is down."),
]


def evaluate(view: StateView, cfg: Config) -> List[MetricSample]:
    """The samples as of this detector pass."""
    return list(_compute(view, cfg))


def samples(rt: Any) -> Iterator[MetricSample]:
    return iter(rt.evaluated.get(__name__, ()))


def _compute(view: StateView, cfg: Config) -> Iterator[MetricSample]:
    for (npu, chip), tr in sorted(hbm_trends(view, cfg).items()):
        if tr.growing and tr.eta_seconds is not None:
            yield MetricSample("npu_watchdog_npu_hbm_full_eta_seconds",
                               {"npu": str(npu), "chip": str(chip)}, round(tr.eta_seconds, 1))
    # One series per discovered job, from the very views its stall pass reads; else the config's job.
    for jv, jcfg in job_passes(view, cfg) or [(view, cfg)]:
        job = {JOB_LABEL: jcfg.job_label}
        if not job[JOB_LABEL]:
            continue  # discovery on, no job on the node: no job to say anything about
        yield MetricSample("npu_watchdog_job_stalled", job, 1 if assess(jv, jcfg).stalled else 0)
        progress = job_progress(jv, jcfg)
        if progress.at is not None:
            yield MetricSample("npu_watchdog_job_progress_age_seconds", job, max(jv.now - progress.at, 0.0))

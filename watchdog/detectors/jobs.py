"""One detector pass per discovered job, so each job's findings carry its own job label.

A detector written for one job (liveness, stall, logs) is wrapped with `per_job`: when the process
probe reports discovered jobs, the detector runs once per job over a view holding only that job's
ranks, heartbeats and log matches, with a config whose `job.name` is the job's, and its HCCL
timeouts stretching the log cascade window. Without discovered jobs it runs once, unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict, List, Tuple

from watchdog.config.schema import Config
from watchdog.findings import Finding
from watchdog.observations import JobState, ProcessObservation
from watchdog.state import Sample, StateView

Detector = Callable[[StateView, Config], List[Finding]]


def _filter(probe: str, value: Any, job: JobState, first: bool) -> Any:
    if probe == "process" and isinstance(value, ProcessObservation):
        mine = tuple(p for p in value.processes if p.job == job.name)
        return replace(value, processes=mine, gone=tuple(g for g in value.gone if g.job == job.name),
                       expected=job.expected, first_seen_at=job.first_seen_at, jobs=(job,),
                       clean_end=job.clean_end)
    if probe == "heartbeat" and hasattr(value, "readings"):
        return replace(value, readings=tuple(r for r in value.readings
                                             if r.job == job.name or (r.job is None and first)))
    if probe == "logs" and hasattr(value, "active"):
        return replace(value, active=tuple(a for a in value.active
                                           if a.job == job.name or (a.job is None and first)))
    return value


def job_view(view: StateView, job: JobState, first: bool) -> StateView:
    samples: Dict[str, Tuple[Sample, ...]] = dict(view.samples)
    for probe in ("process", "heartbeat", "logs"):
        hist = view.samples.get(probe)
        if hist:
            samples[probe] = tuple(Sample(s.time, _filter(probe, s.value, job, first)) for s in hist)
    # Its own summaries and memo: the runner's summaries and answers are the whole node's.
    return replace(view, samples=samples, summaries=None, memo={})


def job_config(config: Config, job: JobState) -> Config:
    """The config as one job's pass sees it: the job's own name. (Its HCCL timeouts come with its
    ranks, `ProcessInfo.hccl_env`, which watchdog.hccl reads from the job's view.)"""
    return config.model_copy(update={"job": config.job.model_copy(update={"name": job.name})})


def jobs_of(view: StateView) -> Tuple[JobState, ...]:
    sample = view.latest("process")
    if sample is None or not isinstance(sample.value, ProcessObservation) or not sample.value.discovered:
        return ()
    return sample.value.jobs


def per_job(fn: Detector) -> Detector:
    def detect(view: StateView, config: Config) -> List[Finding]:
        jobs = jobs_of(view)
        if not jobs:
            return fn(view, config)
        out: List[Finding] = []
        for i, job in enumerate(jobs):
            out.extend(fn(job_view(view, job, i == 0), job_config(config, job)))
        return out

    detect.__doc__ = fn.__doc__
    return detect

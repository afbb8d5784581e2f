"""One detector pass per discovered job, so each job's findings carry its own job label.

A detector written for one job (liveness, stall, logs) is wrapped with `per_job`: when the process
probe reports discovered jobs, the detector runs once per job over a view holding only that job's
ranks, heartbeats and log matches, with a config whose `job.name` is the job's, and its HCCL
timeouts stretching the log cascade window. Without discovered jobs it runs once, unchanged.
"""

from __future__ import annotations

from collections import abc
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from watchdog.config.schema import Config
from watchdog.findings import Finding
from watchdog.observations import JobState, ProcessObservation
from watchdog.state import Sample, StateView
from watchdog.summaries import Summaries

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


#: The probes whose samples a job's view filters; the others' summaries are the node's.
FILTERED = ("process", "heartbeat", "logs")


class JobHistory(abc.Sequence):  # type: ignore[type-arg]
    """One job's view of a probe's history: a sample is filtered when it is read (and kept), so a
    pass that reads only the newest samples neither filters nor walks the hour behind them."""

    __slots__ = ("origin", "_fn", "_made")

    def __init__(self, origin: Sequence[Sample], fn: Callable[[Any], Any]):
        #: The store's history this view filters (watchdog.summaries finds new samples in it).
        self.origin = origin
        self._fn = fn
        self._made: Dict[int, Sample] = {}

    def __len__(self) -> int:
        return len(self.origin)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self.origin))))
        n = len(self.origin)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(i)
        got = self._made.get(j)
        if got is None:
            src = self.origin[j]
            got = self._made[j] = Sample(src.time, self._fn(src.value))
        return got


class JobSummaries:
    """The runner's summaries of each discovered job (of the probes its view filters), fed only
    the samples new since the last pass, as the node's are: a per-job pass then costs the same
    after a minute as after a day. Keyed by job and by whether it is the first job (which also
    gets the readings that name no job), so a change of either starts a fresh fold."""

    def __init__(self) -> None:
        self._jobs: Dict[Tuple[str, bool], Summaries] = {}
        self._configs: Dict[str, Tuple[Config, JobState, Config]] = {}

    def keep(self, jobs: Tuple[JobState, ...]) -> None:
        """Forget the summaries of jobs no longer reported."""
        names = {j.name for j in jobs}
        for key in [k for k in self._jobs if k[0] not in names]:
            del self._jobs[key]
        for name in [n for n in self._configs if n not in names]:
            del self._configs[name]

    def config(self, config: Config, job: JobState) -> Config:
        """`job_config`, made again only when the config or the job changes (a config change
        reconfigures the job's summaries)."""
        got = self._configs.get(job.name)
        if got is None or got[0] is not config or got[1] != job:
            got = self._configs[job.name] = (config, job, job_config(config, job))
        return got[2]

    def update(self, key: Tuple[str, bool], view: StateView, config: Config) -> Dict[str, Any]:
        summaries = self._jobs.get(key)
        if summaries is None:
            summaries = self._jobs[key] = Summaries(FILTERED)
        return summaries.update(view, config)


def job_view(view: StateView, job: JobState, first: bool, config: Optional[Config] = None) -> StateView:
    """The view one job's pass reads: its filtered process, heartbeat and logs samples, the node's
    summaries of the other probes, and (with the runner's `job_summaries`) its own summaries
    brought up to date with the samples new since the last pass."""
    samples: Dict[str, Sequence[Sample]] = dict(view.samples)
    for probe in FILTERED:
        hist = view.samples.get(probe)
        if hist:
            samples[probe] = JobHistory(hist, lambda v, p=probe: _filter(p, v, job, first))
    shared = {k: v for k, v in (view.summaries or {}).items() if k not in FILTERED}
    # Its own memo: the runner's answers are the whole node's.
    jv = replace(view, samples=samples, summaries=shared, memo={}, job_summaries=None)
    if view.job_summaries is not None and config is not None:
        own = view.job_summaries.update((job.name, first), jv, config)
        jv = replace(jv, summaries={**shared, **own})
    return jv


def job_config(config: Config, job: JobState) -> Config:
    """The config as one job's pass sees it: the job's own name. (Its HCCL timeouts come with its
    ranks, `ProcessInfo.hccl_env`, which watchdog.hccl reads from the job's view.)"""
    return config.model_copy(update={"job": config.job.model_copy(update={"name": job.name})})


def jobs_of(view: StateView) -> Tuple[JobState, ...]:
    sample = view.latest("process")
    if sample is None or not isinstance(sample.value, ProcessObservation) or not sample.value.discovered:
        return ()
    return sample.value.jobs


def with_job_ranks(findings: List[Finding], view: StateView) -> List[Finding]:
    """Job-level findings (no `rank` label: a stall, a job gone) carry the job's ranks on this node
    in `details["job_ranks"]`; fleet mode pushes them as the `ranks` annotation, so the relay
    counts the ranks a hang affects from the nodes' own data."""
    sample = view.latest("process")
    if sample is None or not isinstance(sample.value, ProcessObservation):
        return findings
    ranks = sorted({p.rank for p in sample.value.processes + sample.value.gone if p.rank is not None})
    if not ranks:
        return findings
    return [f if "rank" in f.labels or "job_ranks" in f.details
            else replace(f, details={**f.details, "job_ranks": ranks}) for f in findings]


def per_job(fn: Detector) -> Detector:
    def detect(view: StateView, config: Config) -> List[Finding]:
        jobs = jobs_of(view)
        if not jobs:
            return with_job_ranks(fn(view, config), view)
        out: List[Finding] = []
        for i, job in enumerate(jobs):
            jv, cfg = _job_pass(view, config, job, i == 0)
            out.extend(with_job_ranks(fn(jv, cfg), jv))
        return out

    detect.__doc__ = fn.__doc__
    return detect


def _job_pass(view: StateView, config: Config, job: JobState, first: bool) -> Tuple[StateView, Config]:
    """The job's view and config, made once per pass and shared by the per-job detectors (the
    node view's memo lives for one pass)."""
    def make() -> Tuple[StateView, Config]:
        store = view.job_summaries
        cfg = store.config(config, job) if store is not None else job_config(config, job)
        return job_view(view, job, first, cfg), cfg

    return view.once(("job_pass", job, first, id(config)), make)

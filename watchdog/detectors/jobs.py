"""One detector pass per discovered job, so each job's findings carry its own job label.

A detector written for one job (liveness, stall, logs, the NPU rules) is wrapped with `per_job`:
when the process probe reports discovered jobs, the detector runs once per job over a view holding
only that job's ranks, heartbeats, log matches and NPU chips, with a config whose `job.name` is
the job's, and its HCCL timeouts stretching the log cascade window. Without discovered jobs it
runs once, unchanged.

This module is the one place where a chip is attributed to a job (`chip_owners`): the rank pids
npu-smi's process table lists on it, else the NPU the rank's device variables name. A detector
wrapped with `per_job(fn, node_rest=True)` also runs once over the chips no job holds, with the
node's labels only (no `training_job`): a device finding is a job's or the node's, never a
made-up job's.
"""

from __future__ import annotations

import logging
from collections import abc
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from watchdog.config.schema import Config
from watchdog.config.sections import discovery as discovery_section
from watchdog.core.findings import Finding
from watchdog.observations import NPU, PROCESS, JobScoped, JobState, NpuObservation, ProcessObservation
from watchdog.core.state import Sample, StateView
from watchdog.summaries import Summaries

log = logging.getLogger(__name__)

Detector = Callable[[StateView, Config], List[Finding]]


ChipKey = Tuple[int, int]
#: The pseudo-job of the chips no job holds (a name no discovered job can have: not label-safe).
NODE = "\0node"


def chip_owners(obs: NpuObservation, procs: Optional[ProcessObservation]) -> Dict[ChipKey, str]:
    """Which job holds each chip of one npu-smi round (present or missing); chips no job holds
    are left out. A chip belongs to the job one of whose rank pids npu-smi lists on it; failing
    that (a container's npu-smi sees no processes, a card gone from the table), to the job whose
    rank runs on that NPU by discovery (`ProcessInfo.npu`: npu-smi's table when it named the
    rank, else ASCEND_DEVICE_ID/DEVICE_ID or the local rank through ASCEND_RT_VISIBLE_DEVICES)."""
    if procs is None:
        return {}
    ranks = procs.processes + procs.gone
    by_pid = {p.pid: p.job for p in ranks if p.job}
    by_npu: Dict[int, str] = {}
    for p in ranks:
        if p.job and p.npu is not None:
            by_npu.setdefault(p.npu, p.job)
    out: Dict[ChipKey, str] = {}
    for held in obs.processes:
        job = by_pid.get(held.pid)
        if job is not None:
            out.setdefault((held.npu, held.chip), job)
    for c in obs.chips + obs.missing:
        key = (c.npu, c.chip)
        if key not in out and c.npu in by_npu:
            out[key] = by_npu[c.npu]
    return out


def latest_chip_owners(view: StateView) -> Tuple[Dict[ChipKey, str], Dict[int, Tuple[int, int]]]:
    """`chip_owners` of the latest npu and process rounds, and npu-smi's chip mapping (logic id
    -> NPU, chip); both empty while the npu probe has no round. For the detectors that label a
    chip's finding with the job holding it (links, sub-health)."""
    npu = view.latest(NPU)
    if npu is None or npu.value.absent:
        return {}, {}
    proc = view.latest(PROCESS)
    return chip_owners(npu.value, proc.value if proc is not None else None), dict(npu.value.chip_map)


def _npu_filter(value: NpuObservation, owners: Dict[ChipKey, str], job: str) -> NpuObservation:
    mine = lambda key: owners.get(key, NODE) == job  # noqa: E731
    return replace(value, chips=tuple(c for c in value.chips if mine((c.npu, c.chip))),
                   processes=tuple(p for p in value.processes if mine((p.npu, p.chip))),
                   missing=tuple(c for c in value.missing if mine((c.npu, c.chip))),
                   node_chips=frozenset((c.npu, c.chip) for c in value.chips))


def _owners(view: StateView, value: NpuObservation) -> Dict[ChipKey, str]:
    """chip_owners of one npu round against the newest process round (once per pass and round)."""
    sample = view.latest("process")
    procs = sample.value if sample is not None and isinstance(sample.value, ProcessObservation) else None
    return view.once(("chip_owners", id(value), id(procs)), lambda: chip_owners(value, procs))


#: Whether a record type is `JobScoped`, per type: a runtime-checkable protocol's isinstance
#: walks the protocol's attributes on every call (about 7 us), and a pass asks it of every sample
#: each job's view reads. Record types are few (one per probe), so the table stays small.
_SCOPED: Dict[type, bool] = {}


def _filter(value: Any, job: JobState, first: bool, view: Optional[StateView] = None) -> Any:
    """One sample as the job's view sees it: chips by their owner (which needs the process
    round), other records as they narrow themselves (`JobScoped.for_job`)."""
    if isinstance(value, NpuObservation):
        return _npu_filter(value, _owners(view, value), job.name) if view is not None else value
    scoped = _SCOPED.get(type(value))
    if scoped is None:
        scoped = _SCOPED[type(value)] = isinstance(value, JobScoped)
    if scoped:
        return value.for_job(job, first)
    return value


def filtered() -> Tuple[str, ...]:
    """The probes whose samples a job's view filters: those discovery feeds (it points them at
    the jobs); the others' summaries are the node's."""
    return discovery_section.feeds()


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
        names = {j.name for j in jobs} | {NODE}
        for key in [k for k in self._jobs if k[0] not in names]:
            # A job back later is folded afresh from the history (its pace replays old rounds).
            log.info("summaries of job %s dropped: discovery no longer reports it", key[0])
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
            summaries = self._jobs[key] = Summaries(filtered())
        return summaries.update(view, config)


def job_view(view: StateView, job: JobState, first: bool, config: Optional[Config] = None) -> StateView:
    """The view one job's pass reads: its filtered process, heartbeat and logs samples, the node's
    summaries of the other probes, and (with the runner's `job_summaries`) its own summaries
    brought up to date with the samples new since the last pass."""
    samples: Dict[str, Sequence[Sample]] = dict(view.samples)
    per_job = filtered()
    for probe in per_job:
        hist = view.samples.get(probe)
        if hist:
            samples[probe] = JobHistory(hist, lambda v: _filter(v, job, first, view))
    shared = {k: v for k, v in (view.summaries or {}).items() if k not in per_job}
    # Its own memo: the runner's answers are the whole node's.
    jv = replace(view, samples=samples, summaries=shared, memo={}, job_summaries=None)
    if view.job_summaries is not None and config is not None:
        own = view.job_summaries.update((job.name, first), jv, config)
        jv = replace(jv, summaries={**shared, **own})
    return jv


def node_view(view: StateView, config: Optional[Config] = None) -> StateView:
    """The view of the node's own chips (those no discovered job holds): a job's view of the
    pseudo-job NODE, so it holds no rank, heartbeat or log match, and a chip in it counts as held
    only when npu-smi lists a process on it that is no discovered job's."""
    return job_view(view, JobState(NODE, 0.0), False, config)


def job_config(config: Config, job: JobState) -> Config:
    """The config as one job's pass sees it: the job's own name. (Its HCCL timeouts come with its
    ranks, `ProcessInfo.hccl_env`, which watchdog.parse.hccl reads from the job's view.)"""
    return config.for_job(job.name)


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


def per_job(fn: Detector, node_rest: bool = False) -> Detector:
    """`fn` once per discovered job over the job's view; with `node_rest` (device rules) also once
    over the chips no job holds, labelled with the node only."""
    # Device findings name their chip, not the job's ranks (the relay counts a job's ranks from
    # its job-level findings).
    ranks_of = (lambda found, _view: found) if node_rest else with_job_ranks

    def detect(view: StateView, config: Config) -> List[Finding]:
        jobs = jobs_of(view)
        if not jobs:
            return ranks_of(fn(view, config), view)
        out: List[Finding] = []
        for jv, cfg in job_passes(view, config):
            out.extend(ranks_of(fn(jv, cfg), jv))
        if node_rest:
            out.extend(fn(view.once(("node_pass", id(config)), lambda: node_view(view, config)), config))
        return out

    detect.__doc__ = fn.__doc__
    return detect


def job_passes(view: StateView, config: Config) -> List[Tuple[StateView, Config]]:
    """(view, config) of each discovered job's pass, shared by the per-job detectors and the
    per-job metrics of one pass; empty without discovered jobs."""
    return [_job_pass(view, config, job, i == 0) for i, job in enumerate(jobs_of(view))]


def _job_pass(view: StateView, config: Config, job: JobState, first: bool) -> Tuple[StateView, Config]:
    """The job's view and config, made once per pass and shared by the per-job detectors (the
    node view's memo lives for one pass)."""
    def make() -> Tuple[StateView, Config]:
        store = view.job_summaries
        cfg = store.config(config, job) if store is not None else job_config(config, job)
        return job_view(view, job, first, cfg), cfg

    return view.once(("job_pass", job, first, id(config)), make)

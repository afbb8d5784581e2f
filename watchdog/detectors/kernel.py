"""Kernel findings: what the kernel log said about a rank or the node (watchdog.probes.kernel).

A record naming a rank's pid and command name (OOM kill, segfault, trap, hung task) is that rank's finding, with
its `training_job`, `rank` and `npu` labels: from discovery when the probe read the record,
else from the process probe's ranks (alive or gone). Any other record is a node finding; a
record about some other process is info when it is an OOM kill, segfault or trap (recorded, paging
nobody), at most a warning otherwise (a hung task). A record written before the daemon started
that names no watched rank is history, not an incident: a fresh start reads the last records of
the kernel log, and other processes' old kills must not page or message anyone then. A finding
stays in force for `probes.kernel.hold` after its newest record.

`kernel_events_for_pids` is the one question other rules ask (cause of death, a clean end).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

from watchdog.config.schema import Config
from watchdog.core.findings import JOB_LABEL, SEVERITY_RANK, Finding
from watchdog.observations import PROCESS, KernelEvent, KernelObservation
from watchdog.core.rulecatalog import Rule, probe_wait
from watchdog.core.state import StateView
from watchdog.probes.kernel import SECTION as KERNEL_CONFIG

#: Severity of a record about a process that is no rank, at most: another process's OOM kill or
#: segfault is recorded (status, metrics, the snapshot's findings) but pages nobody (channels take
#: warning and up); a hung task or a lockup says the node itself is stuck (warning).
NODE_PROCESS_SEVERITY = {"crash": "info", "oom": "info"}
NODE_PROCESS_DEFAULT = "warning"
#: A record's time is boot time + its monotonic stamp, the daemon's start the wall clock: records
#: within this much before the start are not called history (the two clocks round differently).
CLOCK_SLACK = 1.0


def _obs(view: StateView) -> Optional[KernelObservation]:
    sample = view.latest("kernel")
    return sample.value if sample is not None and isinstance(sample.value, KernelObservation) else None


def kernel_events_for_pids(view: StateView, pids: Iterable[int], since: Optional[float] = None) -> Tuple[KernelEvent, ...]:
    """The kernel's records (within the probe's hold) about any of `pids`, oldest first:
    an OOM kill, segfault, trap or hung task of one of a job's processes. A record older than
    the process holding the pid is not about it (`KernelEvent.about`); a pid the process probe never
    followed (a launcher) is bounded by the earliest start among `pids` it did follow."""
    obs = _obs(view)
    wanted = set(pids)
    if obs is None or not wanted:
        return ()
    ranks = _ranks_by_pid(view)
    starts = [s for s in (ranks[p][3] for p in wanted if p in ranks) if s is not None]
    earliest = min(starts) if starts else None
    return tuple(e for e in obs.recent if e.pid in wanted and (since is None or e.time >= since)
                 and e.about(ranks[e.pid][3] if e.pid in ranks else earliest)
                 and (e.rank is not None or e.pid not in ranks or e.names(ranks[e.pid][4])))


# job, rank, npu, started at, its command name (the probe's name: comm, or the long program name)
RankOf = Tuple[Optional[str], Optional[int], Optional[int], Optional[float], Tuple[str, ...]]


def _ranks_by_pid(view: StateView) -> Dict[int, RankOf]:
    """pid -> (job, rank, npu, start time, name) of every rank the process probe follows or saw go."""
    sample = view.latest(PROCESS)
    out: Dict[int, RankOf] = {}
    if sample is None:
        return out
    for p in sample.value.gone + sample.value.processes:
        out[p.pid] = (p.job, p.rank, p.npu, p.create_time, (p.name,) if p.name else ())
    return out


def _labels(ev: KernelEvent, config: Config, ranks: Dict[int, RankOf]) -> Dict[str, str]:
    base = dict(config.base_labels)
    job, rank, npu = ev.job, ev.rank, ev.npu
    if ev.pid is not None and ev.pid in ranks and ev.about(ranks[ev.pid][3]) and ev.names(ranks[ev.pid][4]):
        # The probe read the record before it learned the rank (it died at once): the process
        # probe's record of it names its job, rank and NPU (when its pid and name are the rank's).
        pjob, prank, pnpu, _, _ = ranks[ev.pid]
        if rank is None:
            job, rank = pjob, prank
        if npu is None:
            npu = pnpu
    labels = {**base, "kernel_rule": ev.rule}
    if rank is not None:
        if job:
            labels[JOB_LABEL] = job
        labels["rank"] = str(rank)
        if npu is not None:
            labels["npu"] = str(npu)
    elif ev.device is not None:
        labels["device"] = str(ev.device)
    return labels


def detect(view: StateView, config: Config) -> List[Finding]:
    cfg = KERNEL_CONFIG.of(config)
    obs = _obs(view)
    if not cfg.enabled or obs is None:
        return []
    ranks = _ranks_by_pid(view)
    grouped: Dict[Tuple[Tuple[str, str], ...], List[Tuple[KernelEvent, Dict[str, str]]]] = {}
    for ev in obs.recent:
        if view.now - ev.time > cfg.hold:
            continue
        labels = _labels(ev, config, ranks)
        if ev.time < view.started_at - CLOCK_SLACK and "rank" not in labels:
            continue  # history from before this daemon started, about no watched process: not an incident
        grouped.setdefault(tuple(sorted(labels.items())), []).append((ev, labels))
    return [_finding(evs) for evs in grouped.values()]


def _finding(evs: List[Tuple[KernelEvent, Dict[str, str]]]) -> Finding:
    last, labels = evs[-1]
    severity = last.severity
    cap = NODE_PROCESS_SEVERITY.get(last.category, NODE_PROCESS_DEFAULT)
    if "rank" not in labels and last.pid is not None and SEVERITY_RANK[severity] > SEVERITY_RANK[cap]:
        severity = cap
    who = f"rank {labels['rank']} (pid {last.pid})" if "rank" in labels else (
        f"pid {last.pid}" if last.pid is not None else "the node")
    pids = sorted({e.pid for e, _ in evs if e.pid is not None})
    # One finding rule per kernel rule category; any other category (user rules) is an event.
    for category, rule in (("oom", "kernel_oom"), ("crash", "kernel_crash"), ("device", "kernel_device"),
                           (last.category, "kernel_event")):
        if last.category == category:
            break
    return Finding(
        rule=rule, severity=severity,
        summary=f"{who}: {last.title} (kernel log): {last.text[:200]}",
        labels=labels, hint=last.hint, value=str(len(evs)), since=evs[0][0].time,
        details={"kernel_rule": last.rule, "pids": pids, "seq": [e.seq for e, _ in evs][-20:],
                 "device": last.device},
        evidence=tuple(e.text for e, _ in evs[-5:]),
    )


TRIGGERS = ("kernel", "process")


def _wait(c: Config, f: dict) -> float:
    return probe_wait(c, "kernel")


RULES = (
    Rule("kernel_oom", "critical", severities=("critical", "info"),
         same_event=("rank_missing", "job_gone", "log_oom"), warmup=_wait, title="Killed by the kernel OOM killer"),
    Rule("kernel_crash", "critical", severities=("critical", "info"),
         same_event=("rank_missing", "job_gone", "log_crash"), warmup=_wait, title="Process crashed (kernel log)"),
    Rule("kernel_device", "critical", severities=("critical", "warning", "info"),
         warmup=_wait, title="Hardware or driver error (kernel log)"),
    Rule("kernel_event", "critical", severities=("critical", "warning", "info"),
         severity_key="probes.kernel.rules[].severity", warmup=_wait, title="Kernel reports a hung task or lockup"),
)

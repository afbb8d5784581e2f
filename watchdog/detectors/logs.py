"""Log findings: one per (rule, rank) while its last match is younger than `hold`.

Cascade folding: an HCCL timeout, a traceback or a `Heartbeat Lost` (rules with role `cascade`)
that starts no earlier than a root finding of a `cascade_roots` category (OOM, device fault) and
no later than `cascade_window` after that root's last match is the root's symptom. It is added to
the root finding's evidence and details, and raises no finding of its own: ops get paged once,
for the cause. A cascade with no such root is a finding like any other. All logs on a node belong
to the one configured job, so "same job" holds by construction.

A log line is a point in time, not a state, so a finding needs an end: it resolves `hold`
(default 30m) after the last matching line.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from watchdog.config.schema import Config
from watchdog.detectors.jobs import per_job
from watchdog.findings import Finding
from watchdog.state import StateView


def _job_start(view: StateView) -> Optional[float]:
    """When the ranks started (process probe), to tell an early failure from a late one."""
    sample = view.latest("process")
    procs = getattr(sample.value, "processes", ()) if sample is not None else ()
    times = [p.create_time for p in procs if getattr(p, "create_time", None)]
    return min(times) if times else None


def _device_labels(device: Optional[int], view: StateView) -> Dict[str, str]:
    """Labels naming the device of a log finding: the logic id the line gave, and the NPU ID and
    chip npu-smi uses for it (from `npu-smi info -m`), so the finding and the NPU metrics agree."""
    if device is None:
        return {}
    labels = {"device_id": str(device)}
    sample = view.latest("npu")
    chip_map = getattr(sample.value, "chip_map", None) if sample is not None else None
    if chip_map and device in chip_map:
        npu, chip = chip_map[device]
        labels["npu"], labels["chip"] = str(npu), str(chip)
    return labels


def _hint(a, job_start: Optional[float], early_window: float) -> str:
    if job_start is not None and (a.hint_early or a.hint_late):
        age = a.first_at - job_start
        if age <= early_window and a.hint_early:
            return f"First seen {int(age // 60)} min after the ranks started. " + a.hint_early
        if age > early_window and a.hint_late:
            return f"First seen {age / 3600:.1f} h after the ranks started. " + a.hint_late
    return a.hint


def _detect_job(view: StateView, config: Config) -> List[Finding]:
    cfg = config.probes.logs
    if not cfg.enabled:
        return []
    sample = view.latest("logs")
    active = getattr(sample.value, "active", ()) if sample is not None else ()
    if not active:
        return []
    now = view.now
    live = [a for a in active if now - a.last_at <= cfg.hold]
    roots = [a for a in live if a.role == "root" and a.category in cfg.cascade_roots]
    folded: Dict[int, list] = {}
    standalone = []
    for a in live:
        if a.role != "cascade":
            standalone.append(a)
            continue
        owner = None
        for i, r in enumerate(roots):
            if r.first_at <= a.first_at <= r.last_at + cfg.cascade_window:
                if owner is None or r.first_at < roots[owner].first_at:
                    owner = i
        if owner is None:
            standalone.append(a)
        else:
            folded.setdefault(owner, []).append(a)
    job_start = _job_start(view)
    root_index = {id(r): i for i, r in enumerate(roots)}
    return [_finding(a, folded.get(root_index.get(id(a), -1), []), view, config, job_start) for a in standalone]


def _finding(a, symptoms: list, view: StateView, config: Config, job_start: Optional[float]) -> Finding:
    """One log finding: the match's labels (rank, device), its folded symptoms and evidence."""
    cfg = config.probes.logs
    labels = {**config.base_labels, "log_rule": a.rule, **_device_labels(getattr(a, "device", None), view)}
    if a.rank is not None:
        labels["rank"] = str(a.rank)
    evidence = list(a.evidence)
    for s in symptoms:
        evidence.append(f"[symptom {s.rule}{' rank ' + s.rank if s.rank else ''}] {s.summary}")
    where = f" (rank {a.rank})" if a.rank is not None else ""
    if "npu" in labels:
        where += f" (NPU {labels['npu']} chip {labels['chip']})"
    elif "device_id" in labels:
        where += f" (device {labels['device_id']})"
    summary = f"{a.title}{where}: {a.summary}"
    if symptoms:
        summary += f" (+{len(symptoms)} folded symptom{'s' if len(symptoms) > 1 else ''}: " \
                   + ", ".join(sorted({s.rule for s in symptoms})) + ")"
    return Finding(
        rule=f"log_{a.category}",
        severity=a.severity,
        summary=summary[:600],
        labels=labels,
        hint=_hint(a, job_start, cfg.early_window),
        value=f"{a.count} matching line{'s' if a.count != 1 else ''}",
        since=a.first_at,
        details={
            "source": a.source, "path": a.path, "count": a.count, "last_at": a.last_at,
            "role": a.role, "resolves_at": a.last_at + cfg.hold,
            "symptoms": [{"rule": s.rule, "category": s.category, "rank": s.rank, "count": s.count,
                          "first_at": s.first_at, "text": s.summary} for s in symptoms],
        },
        evidence=tuple(evidence[-(5 + 3):]),
    )


#: Discovered jobs each get their own pass (and job label); see detectors/jobs.py.
detect = per_job(_detect_job)

"""Log findings: one per (rule, rank) while its last match is younger than `hold`.

Cascade folding: an HCCL timeout, a traceback or a `Heartbeat Lost` (rules with role `cascade`)
that starts no earlier than a root finding of a `cascade_roots` category (OOM, device fault) and
no later than `cascade_window` after that root's last match is the root's symptom. It is added to
the root finding's evidence and details, and raises no finding of its own: ops get paged once,
for the cause. A cascade with no such root is a finding like any other, except a generic
vocabulary rule's match, which is never a finding alone (see `_detect_job`). All logs on a node belong
to the one configured job, so "same job" holds by construction.

A log line is a point in time, not a state, so a finding needs an end: it resolves `hold`
(default 30m) after the last matching line.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from watchdog.config.schema import Config
from watchdog.detectors.jobs import per_job
from watchdog.core.findings import JOB_LABEL, Finding
from watchdog.parse.hccl import job_timeouts
from watchdog.core.rulecatalog import Inhibits, Rule, probe_wait
from watchdog.core.state import StateView
from watchdog.observations import NPU, PROCESS
from watchdog.probes.logs import LOGS, ActiveMatch
from watchdog.logrules.codes import describe
from watchdog.parse.steps import find_step
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG


def first_line(a: ActiveMatch) -> str:
    """The first matching line of a match (older records without one: the newest)."""
    return a.first_summary or a.summary


def _job_start(view: StateView) -> Optional[float]:
    """When the ranks started (process probe), to tell an early failure from a late one."""
    sample = view.latest(PROCESS)
    procs = sample.value.processes if sample is not None else ()
    times = [p.create_time for p in procs if p.create_time]
    return min(times) if times else None


def _device_labels(device: Optional[int], view: StateView) -> Dict[str, str]:
    """Labels naming the device of a log finding: the logic id the line gave, and the NPU ID and
    chip npu-smi uses for it (from `npu-smi info -m`), so the finding and the NPU metrics agree."""
    if device is None:
        return {}
    labels = {"device_id": str(device)}
    sample = view.latest(NPU)
    chip_map = sample.value.chip_map if sample is not None else None
    if chip_map and device in chip_map:
        npu, chip = chip_map[device]
        labels["npu"], labels["chip"] = str(npu), str(chip)
    return labels


def _hint(a, job_start: Optional[float], early_window: float) -> str:
    """The rule's hint; for rules with early/late variants, chosen by when the match came, and
    naming the iteration the line printed (the reader compares it with the warm-up length)."""
    if job_start is not None and (a.hint_early or a.hint_late):
        age = a.first_at - job_start
        step = find_step([first_line(a)] + list(a.evidence))
        at = f"at {step[0]} {step[1]}, " if step else ""
        if age <= early_window and a.hint_early:
            return f"First seen {at}{int(age // 60)} min after the ranks started. " + a.hint_early
        if age > early_window and a.hint_late:
            return f"First seen {at}{age / 3600:.1f} h after the ranks started. " + a.hint_late
    return a.hint


def cascade_window(view: StateView, config: Config) -> float:
    """How long after a root its peers' symptoms may still arrive: HCCL's exec timeout of this
    job (they report only when it expires) plus the configured `cascade_window` as margin."""
    sample = view.latest(PROCESS)
    envs = [p.hccl_env for p in sample.value.processes] if sample is not None else []
    return job_timeouts(envs, config).exec_timeout + LOGS_CONFIG.of(config).cascade_window


def _still_broken(view: StateView, root_last_at: float) -> bool:
    """Whether the job a root broke is still broken: a rank that ran at the root's time is gone
    (or a zombie), or fewer ranks than expected run, and no rank was started after the root (a
    restarted job, even one broken again later by something else, releases the old root)."""
    sample = view.latest(PROCESS)
    if sample is None:
        return False
    obs = sample.value
    procs = obs.processes
    alive = [p for p in procs if p.state != "zombie"]
    if any(p.create_time > root_last_at for p in alive):
        return False
    dead = list(obs.gone) + [p for p in procs if p.state == "zombie"]
    if any(g.create_time <= root_last_at for g in dead):
        return True
    expected = obs.expected
    return bool(alive) and expected is not None and len(alive) < expected


def _fold(live: list, roots: list, window: float) -> Tuple[list, Dict[int, list]]:
    """Split the live matches into standalone ones and cascades folded into a root (by the
    root's index; the earliest root whose window covers the cascade's start owns it)."""
    folded: Dict[int, list] = {}
    standalone = []
    for a in live:
        if a.role != "cascade":
            standalone.append(a)
            continue
        owner = None
        for i, r in enumerate(roots):
            if r.first_at <= a.first_at <= r.last_at + window:
                if owner is None or r.first_at < roots[owner].first_at:
                    owner = i
        if owner is None:
            standalone.append(a)
        else:
            folded.setdefault(owner, []).append(a)
    return standalone, folded


def _detect_job(view: StateView, config: Config) -> List[Finding]:
    cfg = LOGS_CONFIG.of(config)
    if not cfg.enabled:
        return []
    sample = view.latest(LOGS)
    active = sample.value.active if sample is not None else ()
    if not active:
        return []
    now = view.now
    window = cascade_window(view, config)

    def is_root(a) -> bool:
        return a.role == "root" and a.category in cfg.cascade_roots

    def in_force(a) -> bool:
        # A root stays in force while the job it broke is still broken (its killed ranks gone,
        # no restart since): its symptoms keep arriving until HCCL's own timeout and beyond.
        return now - a.last_at <= cfg.hold or (is_root(a) and _still_broken(view, a.last_at))

    live = [a for a in active if in_force(a)]
    # Every root still remembered folds its cascades, in force or not: a peer's HCCL timeout
    # arriving after the OOM resolved (the job was restarted) is still that OOM's symptom.
    roots = [a for a in active if is_root(a)]
    standalone, folded = _fold(live, roots, window)
    # A generic vocabulary match (a failure's shape in a wording no exact rule knows, which may be
    # an error the job handled) is evidence, not a page of its own: folded into a root it is one of
    # that root's symptoms, and when a rank or the job then dies the interruption's page names it
    # as the cause (the end judgement reads the last lines with every rule); it counts in
    # npu_watchdog_log_matches_total and `scan` reports it.
    standalone = [a for a in standalone if not a.generic]
    job_start = _job_start(view)
    root_index = {id(r): i for i, r in enumerate(roots)}
    return [_finding(a, folded.get(root_index.get(id(a), -1), []), view, config, job_start) for a in standalone]


def _finding(a, symptoms: list, view: StateView, config: Config, job_start: Optional[float]) -> Finding:
    """One log finding: the match's labels (rank, device), its folded symptoms and evidence."""
    cfg = LOGS_CONFIG.of(config)
    labels = {**config.base_labels, "log_rule": a.rule, **_device_labels(a.device, view)}
    if JOB_LABEL not in labels and a.job:
        # A discovered job's log line read before the process probe's round listed the job (its
        # first seconds): the match knows its job, so the finding keeps one name from the start.
        labels[JOB_LABEL] = a.job
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
    # The first matching line: a title must name where the failure began (the newest line only
    # says it still goes on; the count and the evidence tell that).
    summary = f"{a.title}{where}: {first_line(a)}"
    # A documented vendor code on the line (runtime, HCCL, CANN, Xid) says what the line means.
    code = describe(first_line(a))
    if code is not None:
        summary = f"{a.title}{where} [{code.render('en')}]: {first_line(a)}"
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
            "first_line": first_line(a)[:600], "last_line": a.summary[:600],
            "role": a.role, "resolves_at": a.last_at + cfg.hold,
            "code": None if code is None else {"table": code.table, "code": code.code, "name": code.name,
                                               "kind": code.kind, "en": code.en, "zh": code.zh,
                                               "level": code.level},
            # the code's meaning in Chinese follows the Chinese summary template (digest.summary_in)
            "said": {} if code is None else {"zh": f"：{code.render('zh')}"},
            "symptoms": [{"rule": s.rule, "category": s.category, "rank": s.rank, "count": s.count,
                          "first_at": s.first_at, "text": s.summary} for s in symptoms],
        },
        evidence=tuple(evidence[-(5 + 3):]),
    )


TRIGGERS = ("logs",)

#: Active matches are persisted with the offsets, so after a restart the rule is back within two
#: rounds of the log probe.
_LOGS = lambda c, f: probe_wait(c, "logs")  # noqa: E731
#: An OOM or a device fault kills its rank; the peers then time out in HCCL, print tracebacks,
#: go idle and silent, and the job dies: all its symptoms, folded while it is in force.
_ROOT_SYMPTOMS = Inhibits(("stall", "log_hccl", "log_traceback", "npu_idle", "npu_low_util", "npu_busy_hang",
                           "heartbeat_stale", "heartbeat_no_progress", "throughput_drop", "rank_straggler",
                           "rank_missing", "job_gone", "rank_zombie"))

#: One rule per log category (`log_<category>`).
RULES = (
    Rule("log_nan", "critical", severities=("critical", "warning"),
         same_event=("loss_nan",), inhibits=(Inhibits(("loss_scale_collapse", "throughput_drop")),), warmup=_LOGS, title="NaN loss"),
    Rule("log_oom", "critical", severities=("critical", "warning"),
         inhibits=(_ROOT_SYMPTOMS,), warmup=_LOGS, same_event=("kernel_oom",), title="NPU out of memory"),
    Rule("log_device", "critical", severities=("critical", "warning"),
         inhibits=(_ROOT_SYMPTOMS,), warmup=_LOGS, title="NPU device error"),
    Rule("log_crash", "critical",
         inhibits=(_ROOT_SYMPTOMS,), warmup=_LOGS, same_event=("kernel_crash",), title="Process crashed"),
    Rule("log_hccl", "critical", severities=("critical", "warning"),
         inhibits=(Inhibits(("log_traceback",)),), warmup=_LOGS, title="HCCL error"),
    Rule("log_traceback", "warning",
         warmup=_LOGS, title="Python traceback"),
    Rule("log_custom", "critical", severities=("critical", "warning", "info"),
         severity_key="probes.logs.rules[].severity",
         warmup=_LOGS, title="Log rule matched"),
)

#: Discovered jobs each get their own pass (and job label); see detectors/jobs.py.
detect = per_job(_detect_job)

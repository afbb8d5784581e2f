"""Restarts are events: a job whose launcher's agent keeps restarting its worker group on the
same cause pages once with the count, and again only when the count crosses the next threshold.

Why thresholds 3 and 10: one or two restarts are what an elastic agent is for (a transient link
flap, a preempted peer), and the failure itself already pages through its own rule; the third
restart on the same cause says the restarts do not fix it (torch elastic's common
`--max-restarts 3` is then used up), so it pages as a warning with the count; the tenth says a
job is burning its time in a loop (an agent allowed to restart for ever) and escalates to
critical, which pages again. In between, the count grows in the finding (value, details) without
a message. The finding holds `probes.logs.hold` after the last restart, like a log line.
Pure over the logs probe's restart counts (watchdog.probes.logs.JobRestarts).
"""

from __future__ import annotations

from typing import List

from watchdog.config.schema import Config
from watchdog.core.findings import JOB_LABEL, Finding
from watchdog.core.rulecatalog import Rule, probe_wait
from watchdog.core.state import StateView
from watchdog.detectors.jobs import per_job
from watchdog.probes.logs import LOGS
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG

#: The restart count that pages (warning), and the one that pages again (critical).
THRESHOLDS = (3, 10)

HINT = ("The launcher keeps restarting the job's workers and each restart fails on the same cause: "
        "restarting does not fix it. Fix the cause the alert names (its own alert and the failing rank's "
        "log) before the agent's restarts run out, or stop the job to save the cluster's time.")


def _detect_job(view: StateView, config: Config) -> List[Finding]:
    cfg = LOGS_CONFIG.of(config)
    sample = view.latest(LOGS)
    if not cfg.enabled or sample is None:
        return []
    out: List[Finding] = []
    for r in sample.value.restarts:
        if r.count < THRESHOLDS[0] or view.now - r.last_at > cfg.hold:
            continue
        labels = {**config.base_labels, "cause": r.cause}
        if JOB_LABEL not in labels and r.job:
            labels[JOB_LABEL] = r.job
        what = r.cause_title or "an unknown cause (no failure line before the restarts)"
        out.append(Finding(
            rule="job_restarting", severity="critical" if r.count >= THRESHOLDS[1] else "warning",
            summary=f"the worker group restarted {r.count} times on the same cause: {what} ({r.cause})"[:600],
            # value: the count alone (the messages' summaries say it in their language)
            labels=labels, hint=HINT, value=str(r.count), since=r.first_at,
            details={"restarts": r.count, "cause": r.cause, "cause_title": r.cause_title, "limit": r.limit,
                     "first_at": r.first_at, "last_at": r.last_at, "thresholds": list(THRESHOLDS),
                     "resolves_at": r.last_at + cfg.hold},
            evidence=tuple(x for x in (r.cause_line, r.line) if x),
            snapshot=False,
        ))
    return out


TRIGGERS = ("logs",)

RULES = (
    Rule("job_restarting", "critical", severities=("critical", "warning"),
         warmup=lambda c, f: probe_wait(c, "logs"), title="Job restarting on the same cause"),
)

#: Discovered jobs each get their own pass (and job label); see detectors/jobs.py.
detect = per_job(_detect_job)

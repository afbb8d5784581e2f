"""Findings about the log probe's own blind spots: paths it cannot read, offsets it cannot save.

A watcher that silently matches nothing is worse than none. An unreadable log file or directory
(permissions, a mount gone away) and a state folder where the read offsets cannot be saved
(read-only, full) each raise a warning finding while they last. The probe keeps reading what it
can in both cases, so these findings explain a gap; they never replace a failure alert.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

from watchdog.config.schema import Config
from watchdog.core.findings import JOB_LABEL, Finding
from watchdog.core.rulecatalog import Rule, probe_wait
from watchdog.core.state import StateView
from watchdog.probes.logs import LOGS
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG

UNREADABLE_HINT = (
    "The watchdog cannot read these log paths, so failure lines written there raise no alert. Check the "
    "permissions (the daemon's user needs read access to the files and search access to the directories) "
    "and that the file system is mounted; the daemon log names each path."
)
UNSAVED_HINT = (
    "Log lines are still read and matched, but the read positions cannot be saved in the state folder "
    "(read-only or full?). Until it is writable again, a restart re-reads the lines since the last save "
    "(old failures may alert again). Free space or fix the mount; the finding clears on the next save."
)


def detect(view: StateView, config: Config) -> List[Finding]:
    if not LOGS_CONFIG.of(config).enabled:
        return []
    sample = view.latest(LOGS)
    if sample is None:
        return []
    obs = sample.value
    base = config.base_labels
    out: List[Finding] = []
    # A discovered job's files are that job's blind spot: one finding per job, naming it.
    jobs_of: Dict[str, Dict[str, List[str]]] = {}
    for src, job, msg in obs.unreadable_jobs:
        jobs_of.setdefault(src, {}).setdefault(job, []).append(msg)
    for source, paths in sorted(obs.unreadable.items()):
        per_job = jobs_of.get(source, {})
        of_jobs = {m for msgs in per_job.values() for m in msgs}
        rest = [p for p in paths if p not in of_jobs]
        if rest:
            out.append(_unreadable(source, rest, {**base, "source": source}))
        for job, msgs in sorted(per_job.items()):
            out.append(_unreadable(source, msgs, {**base, "source": source, JOB_LABEL: job}))
    err = obs.state_error
    if err:
        out.append(Finding(
            rule="log_offsets_unsaved", severity="warning", summary=err[:500], labels=dict(base),
            hint=UNSAVED_HINT, value=f"{obs.state_save_errors_total} failed saves",
            snapshot=False,
        ))
    return out


def _unreadable(source: str, paths: Sequence[str], labels: Dict[str, str]) -> Finding:
    return Finding(
        rule="log_unreadable", severity="warning",
        summary=f"log source {source}: {len(paths)} path{'s' if len(paths) != 1 else ''} cannot be read: "
                + "; ".join(paths[:3])[:500],
        labels=labels, hint=UNREADABLE_HINT, value=f"{len(paths)} unreadable",
        evidence=tuple(p[:400] for p in paths[:10]), snapshot=False,
    )


TRIGGERS = ("logs",)

_LOGS = lambda c, f: probe_wait(c, "logs")  # noqa: E731

RULES = (
    Rule("log_unreadable", "warning",
         subject="watchdog", warmup=_LOGS, title="Log file unreadable"),
    Rule("log_offsets_unsaved", "warning",
         subject="watchdog", warmup=_LOGS, title="Log positions not saved"),
)

"""Findings about the watcher itself and about command checks.

"A blind watcher must not look healthy": a probe that cannot observe is a finding of its own, so
silence on the channel never means "all good" when it really means "cannot see".
"""

from __future__ import annotations

from typing import List

from watchdog.config.schema import Config
from watchdog.config.sections import discovery as discovery_section
from watchdog.detectors import npu_smi
from watchdog.core.findings import Finding
from watchdog.core.rulecatalog import Rule, probe_wait
from watchdog.observations import CommandResult
from watchdog.core.state import StateView
from watchdog.probes.command import SECTION as COMMANDS_CONFIG

PROBE_DOWN_HINT = (
    "The watchdog cannot observe this part of the node, so failures there go unnoticed. "
    "Check the daemon log (journalctl -u npu-watchdog) for the probe's error and `npu-watchdog status`."
)


def detect(view: StateView, config: Config) -> List[Finding]:
    base = config.base_labels
    out: List[Finding] = []
    for status in view.statuses.values():
        if status.up or status.runs_total == 0:
            continue
        if status.name == "npu" and npu_smi.explains(status):
            continue  # npu_smi_hung / _failing / _missing name this fault (see detectors.npu_smi)
        since = status.last_success or view.started_at
        out.append(Finding(
            rule="probe_down",
            severity="critical" if status.hung or status.name == "npu" else "warning",
            summary=f"probe {status.name} cannot observe: {status.last_error or 'unknown error'}",
            labels={**base, "probe": status.name},
            hint=PROBE_DOWN_HINT,
            value=status.last_error,
            since=since,
            details={"errors_total": status.errors_total, "timeouts_total": status.timeouts_total},
        ))
    for check in COMMANDS_CONFIG.of(config):
        sample = view.latest(f"command:{check.name}")
        if sample is None:
            continue
        res: CommandResult = sample.value
        if res.returncode == 0 and not res.timed_out:
            continue
        what = "timed out" if res.timed_out else f"exited {res.returncode}"
        out.append(Finding(
            rule="command_check",
            severity=check.severity,
            summary=f"check {check.name} {what}",
            labels={**base, "check": check.name},
            hint=check.hint or f"Run the check by hand: {' '.join(res.argv)}",
            value=what,
            since=sample.time,
            evidence=tuple(res.output_tail.splitlines()[-10:]),
        ))
    return out

#: Probes whose rounds feed this module (empty: run after every round).
TRIGGERS: tuple = ()

RULES = (
    Rule("probe_down", "critical", severities=("critical", "warning"),
         default_for=30.0,
         # Three rounds of the slowest probe that watches the job (those discovery can feed;
         # the kernel log and the command checks are the node's), and the `for`.
         subject="watchdog", warmup=lambda c, f: probe_wait(c, *discovery_section.feeds()) + 30.0,
         title="Watchdog probe failing"),
    Rule("command_check", "critical", severities=("critical", "warning", "info"),
         severity_key="probes.commands[].severity",
         warmup=lambda c, f: 2 * max([float(x.interval) + float(x.timeout) for x in COMMANDS_CONFIG.of(c)] or [0.0]), title="Command check failed"),
)

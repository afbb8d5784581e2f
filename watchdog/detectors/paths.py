"""`path_unmatched`: a configured log source or heartbeat glob still matches no file after the
start grace, while the job is there. Without it a typo in a glob watches nothing in silence."""

from __future__ import annotations

from typing import List

from watchdog.config.schema import Config
from watchdog.core.findings import Finding
from watchdog.core.rulecatalog import Rule, probe_wait
from watchdog.core.state import StateView
from watchdog.probes.logs import LOGS
from watchdog.probes.heartbeat import SECTION as HEARTBEAT_CONFIG
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG
from watchdog.probes.process import SECTION as PROCESS_CONFIG

HINT = ("The watchdog follows nothing here, so failures in these files go unnoticed. Compare the "
        "configured paths with where the job really writes (`ls`), fix the glob, and reload "
        "(`systemctl reload npu-watchdog`). `npu-watchdog check-config` lists every path that matches nothing.")


def _log_sources(view: StateView, config: Config, waited: float) -> List[Finding]:
    sample = view.latest(LOGS)
    if sample is None or not LOGS_CONFIG.of(config).enabled or config.fed_by_discovery("logs"):
        return []  # discovered files are the ranks' own: nothing configured to mistype
    out = []
    for source in LOGS_CONFIG.of(config).sources:
        stats = sample.value.sources.get(source.name)
        if stats is None or stats.files_followed:
            continue
        if sample.value.unreadable.get(source.name):
            continue  # the paths exist but cannot be read: log_unreadable says so, precisely
        out.append(Finding(
            rule="path_unmatched", severity="warning",
            summary=f"log source {source.name}: no file matches {', '.join(source.paths)}",
            labels={**config.base_labels, "probe": "logs", "source": source.name},
            hint=HINT, value="0 files", since=view.started_at, details={"paths": list(source.paths)},
        ))
    return out


def _heartbeats(view: StateView, config: Config) -> List[Finding]:
    cfg = HEARTBEAT_CONFIG.of(config)
    sample, procs = view.latest("heartbeat"), view.latest("process")
    if not cfg.enabled or sample is None or procs is None or not PROCESS_CONFIG.of(config).enabled:
        return []
    if config.fed_by_discovery("heartbeat"):
        return []  # a job that names no heartbeat file (NPU_WATCHDOG_HEARTBEAT) simply has none
    ranks_alive = [p for p in procs.value.processes if p.state != "zombie"]
    if not ranks_alive or any(r.exists for r in sample.value.readings):
        return []
    return [Finding(
        rule="path_unmatched", severity="warning",
        summary=f"{len(ranks_alive)} rank(s) run but no heartbeat file matches {', '.join(cfg.paths)}",
        labels={**config.base_labels, "probe": "heartbeat", "source": "heartbeat"},
        hint=HINT, value="0 files", since=view.started_at, details={"paths": list(cfg.paths)},
    )]


def detect(view: StateView, config: Config) -> List[Finding]:
    waited = view.now - view.started_at
    if waited < PROCESS_CONFIG.of(config).start_grace:
        return []
    return _log_sources(view, config, waited) + _heartbeats(view, config)


TRIGGERS: tuple = ()

RULES = (
    Rule("path_unmatched", "warning",
         subject="watchdog", warmup=lambda c, f: float(PROCESS_CONFIG.of(c).start_grace) + probe_wait(c, "logs", "heartbeat"), title="Watched path matches nothing"),
)

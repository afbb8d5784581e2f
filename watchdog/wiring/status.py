"""What `/api/status`, `npu-watchdog status` and systemd's STATUS= line say about the daemon."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from watchdog import __version__
from watchdog.discovery.status import discovery_status
from watchdog.core.findings import JOB_LABEL
from watchdog.parse.flight_recorder import public_record
from watchdog.logrules.matcher import effective_engine
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG
from watchdog.metrics.pace import status_rows as pace_rows
from watchdog.observations import HeartbeatObservation
from watchdog.runtime import AlertEngineView, Runtime
from watchdog.core.state import ProbeStatus, StateStore


def probe_rows(statuses: Sequence[ProbeStatus], nexts: Mapping[str, Optional[float]]) -> List[Dict[str, Any]]:
    """One row per probe: its health counters and when it runs next."""
    return [{
        "name": st.name, "up": st.up, "interval_seconds": st.interval, "runs_total": st.runs_total,
        "errors_total": st.errors_total, "timeouts_total": st.timeouts_total, "hung": st.hung,
        "last_run": st.last_run, "last_success": st.last_success, "last_duration_seconds": st.last_duration,
        "next_run": nexts.get(st.name), "last_result": st.last_result, "last_error": st.last_error,
    } for st in statuses]


def build_status(rt: Runtime, engine: AlertEngineView, nexts: Mapping[str, Optional[float]]) -> Dict[str, Any]:
    """The daemon's status document (the keys are the API: `status --json` prints them)."""
    config = rt.config
    return {
        "version": __version__, "pid": os.getpid(), "host": config.node.name, JOB_LABEL: config.job_label,
        "started_at": rt.started_at, "config_path": rt.config_path,
        "config_loaded_at": rt.config_loaded_at,
        "probes": probe_rows(rt.state.statuses(), nexts),
        "log_engine": effective_engine(LOGS_CONFIG.of(config).engine),
        "findings": [f.to_dict() for f in engine.current()],
        "detector_errors": list(rt.detector_errors),
        "flight_recorder": flight_recorder_tails(rt.state),
        "discovery": discovery_status(config, rt.discovery),
        "pace": pace_rows(rt.evaluated),
    }


def flight_recorder_tails(state: StateStore) -> List[Dict[str, Any]]:
    """The newest steps of each rank's flight recorder, as the heartbeat probe last read them."""
    sample = state.view().latest("heartbeat")
    obs = sample.value if sample is not None else None
    readings = obs.readings if isinstance(obs, HeartbeatObservation) else ()
    return [{"rank": r.rank, "path": r.path, "records": [public_record(x) for x in r.flight_tail],
             "error": r.flight_error} for r in readings if r.flight_tail or r.flight_error]


def status_line(rt: Runtime, engine: AlertEngineView) -> str:
    """systemd's STATUS= line: probes up, findings, the job."""
    sts = rt.state.statuses()
    up = sum(1 for s in sts if s.up)
    findings = engine.current()
    crit = sum(1 for f in findings if f.severity == "critical")
    job = rt.config.job_label or "(discovered per job)"
    return f"{up}/{len(sts)} probes up, {len(findings)} findings ({crit} critical), job {job}"

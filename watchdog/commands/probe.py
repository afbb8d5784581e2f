"""`npu-watchdog probe`: run every configured probe once, then the detectors; print what was seen."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict

from watchdog.commands import add_config_arg, load_config_or_report, log_for


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("probe", help="run every configured probe once and print observations and findings "
                                     "(log files: only lines written while it runs; see `scan` for existing lines)",
                       description="Run every configured probe once and print what it saw and the findings. Log "
                                   "files are followed from their end, as the daemon does when it first sees a "
                                   "file: lines already in a file are NOT read (a probe round sees only lines "
                                   "written while it runs). To check the lines a log already holds, use "
                                   "`npu-watchdog scan FILE...`. Exit 0 nothing found and every probe up, 1 a "
                                   "finding or a probe down, 2 an invalid config.")
    add_config_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--state-dir", help="keep the probes' state (log read positions) in this folder; default: a "
                   "scratch folder removed at exit, never the daemon's state (a line `probe` read must "
                   "still be alerted by the daemon)")
    p.set_defaults(func=main)


def _plain(value: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _text(out: Dict[str, Any], findings: Any, errors: Any, any_probe: bool) -> str:
    lines = [] if any_probe else ["no probes configured"]
    for p in out["probes"]:
        state = "up  " if p["up"] else "DOWN"
        lines.append(f"{state} {p['name']}: {p['summary'] or p['error']}")
    lines.append(f"\n{len(findings)} finding(s)")
    for f in findings:
        lines.append(f"  [{f.severity}] {f.rule}: {f.summary}  {f.labels}")
        if f.hint:
            lines.append(f"      hint: {f.hint}")
    lines += [f"  detector error: {e}" for e in errors]
    lines += [f"warning: {line}" for line in out["unmatched_paths"]]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    config = load_config_or_report(args.config)
    if config is None:
        return 2
    import tempfile

    from watchdog.config.schema import PathsConfig

    scratch = None if args.state_dir else tempfile.TemporaryDirectory(prefix="npu-watchdog-probe-")
    state_dir = args.state_dir or scratch.name
    config = config.model_copy(update={"paths": PathsConfig(state_dir=state_dir)})
    try:
        return _run(args, config)
    finally:
        if scratch is not None:
            scratch.cleanup()


def _run(args: argparse.Namespace, config: Any) -> int:
    from watchdog.config.pathcheck import unmatched_paths
    from watchdog.privacy.redact import Redactor, config_secrets
    from watchdog.detectors import load_detectors, run_detectors
    from watchdog.probes import ProbeContext, build_probes
    from watchdog.scheduler import ProbeScheduler
    from watchdog.core.state import StateStore

    log_for(config, "warning", "text")
    store = StateStore(config.probes.history)
    probes = build_probes(ProbeContext(config=config, state_dir=config.paths.state_dir))
    sched = ProbeScheduler(store, config.probes.default_timeout, 0, on_round=lambda _n: None, tick=lambda: None)
    for p in probes:
        sched.probes[p.name] = p
        store.register(p.name, p.interval)
    # Run rounds concurrently, as the daemon does, so one hung probe does not delay the others.
    import threading

    threads = [threading.Thread(target=sched.run_now, args=(p.name,), daemon=True) for p in probes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    view = store.view(time.time())
    findings, errors = run_detectors(load_detectors(), view, config)
    out: Dict[str, Any] = {"probes": [], "findings": [f.to_dict() for f in findings], "detector_errors": errors}
    for st in store.statuses():
        sample = view.latest(st.name)
        out["probes"].append({
            "name": st.name, "up": st.up, "duration_seconds": st.last_duration,
            "summary": st.last_result, "error": st.last_error,
            "observation": _plain(sample.value) if sample else None,
        })
    for p in probes:
        p.close()
    out["unmatched_paths"] = unmatched_paths(config)
    # Observations are printed whole (a heartbeat's extra fields, a check's output): what the
    # daemon redacts before it shows anything is redacted here too.
    redact = Redactor(config_secrets(config)).text
    print(redact(json.dumps(out, indent=2, default=str, ensure_ascii=False) if args.json
                 else _text(out, findings, errors, bool(probes))))
    if errors:
        return 1
    return 1 if findings or any(not p["up"] for p in out["probes"]) else 0

"""`npu-watchdog discover [--json]`: what discovery sees on this node now.

Exit 0 when at least one training job is found, 1 when none, 2 on error (bad config, /proc
unreadable). The JSON is exactly the documented schema (docs/discovery.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List

from watchdog.commands import add_config_arg, log_for


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("discover", help="print the training jobs, ranks, NPUs and logs discovery finds now "
                                        "(exit 0 jobs found, 1 none, 2 error)",
                       description="Print the training jobs, ranks, NPUs and logs discovery finds on this node "
                                   "now. Exit status: 0 at least one training job found, 1 no training job "
                                   "runs (not an error of the command: scripts can wait on it), 2 an error "
                                   "(bad config, /proc unreadable).")
    add_config_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output (the documented schema)")
    p.set_defaults(func=main)


def _npu_table(config) -> Dict[int, int]:
    """pid -> NPU from npu-smi's process table, when npu-smi is there (else {}: env is used)."""
    from watchdog.discovery.plan import npu_smi_present
    from watchdog.npusmi.run import NpuSmiRunError, query_info

    program = config.probes.npu.npu_smi
    if not npu_smi_present(program):
        return {}
    try:
        obs = query_info(program, config.probes.npu.command_timeout)
    except NpuSmiRunError as exc:
        print(f"npu-watchdog discover: npu-smi: {exc} (NPUs taken from the environment)", file=sys.stderr)
        return {}
    return {p.pid: p.npu for p in obs.processes}


def text_lines(found) -> List[str]:
    """Each job's header line followed by its own ranks, logs and HCCL settings (with several
    jobs, a rank line must sit under the job it belongs to)."""
    from watchdog.discovery.status import summary_lines

    jobs = found.to_json()["jobs"]
    if not found.jobs:
        return summary_lines({"enabled": True, "jobs": []})
    out: List[str] = []
    for job, data in zip(found.jobs, jobs):
        out.extend(summary_lines({"enabled": True, "jobs": [data]}))
        for r in job.ranks:
            out.append(f"  rank {r.rank} pid {r.pid} npu {r.npu if r.npu is not None else '?'}: "
                       f"{', '.join(r.logs) or 'no log file'}")
        out.append(f"  plog folders: {', '.join(job.plog_dirs) or '-'}; heartbeats: {', '.join(job.heartbeats) or '-'}; "
                   f"HCCL exec/connect timeout {job.hccl.exec_timeout_s}/{job.hccl.connect_timeout_s} s ({job.hccl.source})")
    return out


def main(args: argparse.Namespace) -> int:
    from watchdog.config import ConfigError, load_config, load_config_text
    from watchdog.discovery.feed import scan_options
    from watchdog.discovery.scan import discover
    try:
        config = load_config(args.config) if os.path.exists(args.config) else load_config_text("{}")
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    log_for(config, "warning", "text")  # command lines quoting the config's URL are redacted in logs too
    try:
        found = discover(scan_options(config), _npu_table(config))
    except Exception as exc:  # /proc unreadable, etc.: an error, not "no job"
        print(f"npu-watchdog discover: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(found.to_json(), indent=2, ensure_ascii=False))
    else:
        for line in text_lines(found):
            print(line)
        print(f"({found.processes_scanned} processes scanned in {found.duration_seconds * 1000:.0f} ms)", file=sys.stderr)
    return 0 if found.jobs else 1

"""`npu-watchdog snapshot`: take a failure snapshot now and print the archive's path.

Runs in the calling process (it does not need the daemon to be up: a wedged node is exactly when
someone wants one). The job's processes come from `--pid` (the daemon's own snapshots use the
process probe's view). Policy and rate limit do not apply; the free-space floor does.
"""

from __future__ import annotations

import argparse
import json
import sys

from watchdog.commands import add_config_arg, load_config_or_report, log_for


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("snapshot", help="capture a failure snapshot now and print the archive path")
    add_config_arg(p)
    p.add_argument("--reason", default="", help="why the snapshot is taken (recorded in the manifest)")
    p.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                   help="a process of the job (repeatable); its descendants are included")
    p.add_argument("--json", action="store_true", help='print {"path": ..., "taken": true|false, ...} as JSON')
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from watchdog.snapshots.taker import SnapshotTaker, manual_finding

    config = load_config_or_report(args.config)
    if config is None:
        return 2
    log_for(config, "warning", config.logging.format)
    import logging

    logging.getLogger("watchdog.snapshots").setLevel(logging.ERROR)
    taker = SnapshotTaker(config, None)
    adm = taker.take(manual_finding(config, args.reason), extra_pids=args.pid)
    if args.json:
        print(json.dumps({"taken": adm.path is not None, "path": adm.path, "skipped": adm.skipped,
                          "message": adm.message}, ensure_ascii=False))
        return 0 if adm.path is not None else 1
    if adm.path is None:
        print(f"npu-watchdog: no snapshot taken ({adm.skipped}): {adm.message}", file=sys.stderr)
        return 1
    print(adm.path)
    return 0

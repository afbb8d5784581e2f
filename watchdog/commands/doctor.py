"""`npu-watchdog doctor`: preflight checks of a training node, `--record` and `--compare`.

Exit codes: 0 all checks pass (or were skipped), 1 any warning (`--warn-exit` changes it), 2 any
failure. `--compare A B`: 0 no differences, 1 differences, 2 a record cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from watchdog.commands import log_for
from watchdog.service.defaults import DEFAULT_CONFIG_PATH


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "doctor",
        help="preflight check of this node before a training run (versions, cards, environment, smoke test)",
        description="Check driver/firmware/CANN/torch_npu versions, device health and free memory, "
                    "leftover processes, the job's Ascend environment variables and the daemon's own "
                    "setup. Exit 0 all pass, 1 any warning, 2 any failure.",
    )
    p.add_argument("-c", "--config", default=None,
                   help=f"config file (default {DEFAULT_CONFIG_PATH} if it exists, else built-in defaults)")
    p.add_argument("--expect", type=int, metavar="N", help="devices this node must show (overrides doctor.expected_devices)")
    p.add_argument("--python", metavar="PATH", help="the training job's python interpreter (versions, --smoke)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--env-file", metavar="FILE", help="the job's environment as KEY=VALUE lines (e.g. its launch script's exports)")
    src.add_argument("--pid", type=int, metavar="PID", help="a running rank of the job: read /proc/PID/environ")
    p.add_argument("--smoke", action="store_true",
                   help="run a small matmul and transformer layer on every NPU in --python and compare with CPU")
    p.add_argument("--send-test", action="store_true", help="send a test alert through the configured channels")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--warn-exit", type=int, default=1, choices=(0, 1), metavar="{0,1}",
                   help="exit status when the worst result is a warning (default 1)")
    p.add_argument("--record", metavar="DIR", help="write DIR/environment.json (mode 0600) to keep next to checkpoints")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="show what changed between two environment.json records (or their directories)")
    p.set_defaults(func=main)


def _compare(args: argparse.Namespace) -> int:
    from watchdog.doctor.report import RecordError, compare_records, load_record, render_compare

    try:
        a = load_record(args.compare[0])
        b = load_record(args.compare[1])
    except RecordError as exc:
        print(f"doctor --compare: {exc}", file=sys.stderr)
        return 2
    if args.json:
        diffs = [{"section": s, "key": k, "a": x, "b": y} for s, k, x, y in compare_records(a, b)]
        print(json.dumps({"a": args.compare[0], "b": args.compare[1], "differences": diffs}, indent=2))
        return 1 if diffs else 0
    text = render_compare(args.compare[0], a, args.compare[1], b)
    sys.stdout.write(text)
    return 1 if compare_records(a, b) else 0


def main(args: argparse.Namespace) -> int:
    if args.compare:
        return _compare(args)

    from watchdog.config import ConfigError, load_config
    from watchdog.config.schema import Config
    from watchdog.doctor.gather import DoctorOptions, run_doctor
    from watchdog.doctor.report import render_json, render_table, write_record

    config_path = args.config
    if config_path is None and os.path.exists(DEFAULT_CONFIG_PATH):
        config_path = DEFAULT_CONFIG_PATH
    errors = []
    source = "defaults"
    if config_path is None:
        config = Config()
    else:
        source = config_path
        try:
            config = load_config(config_path)
        except ConfigError as exc:
            errors = exc.errors
            config = Config()
    log_for(config, "warning", "text")  # `--send-test`: a library's warning quoting the URL is redacted
    if args.expect is not None and args.expect < 1:
        print("doctor: --expect must be at least 1", file=sys.stderr)
        return 2
    opts = DoctorOptions(config=config, config_source=source, config_errors=errors, expect=args.expect,
                         python=args.python, env_file=args.env_file, pid=args.pid, smoke=args.smoke,
                         send_test=args.send_test)
    report = run_doctor(opts)
    sys.stdout.write(render_json(report) + "\n" if args.json else render_table(report))
    if args.record:
        try:
            path = write_record(report, args.record)
        except OSError as exc:
            print(f"doctor: cannot write the record into {args.record}: {exc.strerror}", file=sys.stderr)
            return 2
        print(f"recorded {path}", file=sys.stderr)
    return report.exit_code(warn_exit=args.warn_exit)

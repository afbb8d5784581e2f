"""Argument parsing only: each subcommand lives in `watchdog/commands/<name>.py`.

Exit codes: 0 success, 1 the command ran and found a problem (or failed at run time), 2 usage or
config errors.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from watchdog.release import version_line

#: Modules offering `register(subparsers)`; listed once so every command shows in --help.
COMMAND_MODULES = (
    "watchdog.commands.run",
    "watchdog.commands.check_config",
    "watchdog.commands.probe",
    "watchdog.commands.status",
    "watchdog.commands.npu_smi",
    "watchdog.commands.scan",
    "watchdog.commands.alerts",
    "watchdog.commands.snapshot",
    "watchdog.commands.doctor",
    "watchdog.commands.discover",
    "watchdog.commands.demo",
    "watchdog.commands.relay",
    "watchdog.commands.completion",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npu-watchdog",
        description="Watch an Ascend NPU training job: stalls, NaN/inf loss, NPU OOM, lost cards, HCCL hangs.",
    )
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in == ["--version"]:  # answered before any subcommand is even registered
        print(version_line())
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0

"""Argument parsing only: each subcommand lives in `watchdog/commands/<name>.py`.

Exit codes: 0 success, 1 the command ran and found a problem (or failed at run time), 2 usage or
config errors.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from watchdog.compat import load_without_openssl
from watchdog.release import version_line

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npu-watchdog",
        description="Watch an Ascend NPU training job: stalls, NaN/inf loss, NPU OOM, lost cards, HCCL hangs.",
    )
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Here, not at the top: `--version` is answered before any subcommand is registered.
    from watchdog.commands import (alerts, check_config, completion, demo, discover, doctor,  # noqa: I001  see above
                                   npu_smi, probe, relay, run, scan, snapshot, status)
    # Listed once, in --help's order, so every command shows there.
    for module in (run, check_config, probe, status, npu_smi, scan, alerts, snapshot, doctor, discover,
                   demo, relay, completion):
        module.register(sub)
    parser.set_defaults(parser=parser)  # `completion` describes the whole parser
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
    if args.command == "run":  # the daemon, before assemble() imports pydantic and the rest (see there)
        load_without_openssl()
    from watchdog.plugins_list import assemble  # the composition root, once a command runs: --help stays light

    assemble()
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0

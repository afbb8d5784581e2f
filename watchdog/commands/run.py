"""`npu-watchdog run`: the daemon in the foreground (systemd runs it like this)."""

from __future__ import annotations

import argparse
import sys

from watchdog.commands import add_config_arg, load_config_or_report, log_for


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("run", help="run the daemon in the foreground")
    add_config_arg(p)
    p.add_argument("--log-format", choices=("text", "json"), help="override logging.format")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="override logging.level")
    p.add_argument("--state-dir", help="override paths.state_dir (e.g. for a run by hand)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import sqlite3

    from watchdog.config.load import with_state_dir
    from watchdog.daemon import Daemon
    from watchdog.service.malloc import limit_arenas
    from watchdog.service.statelock import StateFolderBusy

    limit_arenas()  # before any thread starts (see watchdog.service.malloc)
    config = load_config_or_report(args.config)
    if config is None:
        return 2
    if args.state_dir:
        config = with_state_dir(config, args.state_dir)
    log_for(config, args.log_level or config.logging.level, args.log_format or config.logging.format)
    from watchdog.config.placeholders import refusal

    refused = refusal(config)
    if refused:  # a fresh install started before its config was edited must not page the example URL
        import logging

        logging.getLogger("watchdog.daemon").error("%s: %s", args.config, refused)
        return 2
    try:
        daemon = Daemon(config, args.config)
    except StateFolderBusy as exc:
        print(f"npu-watchdog: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"npu-watchdog: cannot prepare {config.paths.state_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:  # a new database on a full or read-only disk (an existing one opens)
        print(f"npu-watchdog: cannot open the alert state in {config.paths.state_dir}: {exc}", file=sys.stderr)
        return 1
    return daemon.run()

"""`npu-watchdog relay`: Alertmanager webhook in, one Feishu card / Slack message per job incident out."""

from __future__ import annotations

import argparse
import logging
import queue
import signal
import sys
import threading

from watchdog.commands import log_for
from watchdog.service.defaults import DEFAULT_RELAY_CONFIG


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("relay", help="receive Alertmanager's webhook, send one message per training-job incident")
    p.add_argument("-c", "--config", default=DEFAULT_RELAY_CONFIG,
                   help=f"relay config file (default {DEFAULT_RELAY_CONFIG})")
    p.add_argument("--check", action="store_true", help="validate the config and exit")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from watchdog.config.load import ConfigError
    from watchdog.relay.config import load_relay_config
    from watchdog.service.signals import deliver_to, inbox

    try:
        config = load_relay_config(args.config)
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    if args.check:
        print(f"{args.config}: ok ({len(config.alerting.channels)} channel(s), listening on {config.listen})")
        if config.exposure():
            print(f"warning: {config.exposure()}")
        return 0
    log_for(config, args.log_level, args.log_format)
    from watchdog.relay.server import Relay, make_server

    try:
        relay = Relay(config)
        server = make_server(relay)
    except OSError as exc:
        print(f"npu-watchdog relay: cannot start: {exc.strerror or exc}", file=sys.stderr)
        return 1
    relay.start()
    # Not an Event set from the handler: see watchdog.service.signals.
    stops = inbox()
    deliver_to(stops, (signal.SIGTERM, signal.SIGINT))
    thread = threading.Thread(target=server.serve_forever, name="relay-http", daemon=True)
    thread.start()
    print(f"npu-watchdog relay listening on {config.listen}", file=sys.stderr, flush=True)
    if config.exposure():
        logging.getLogger("watchdog.relay").warning("%s", config.exposure(), extra={"event": "relay_unauthenticated"})
    while True:  # timed: CPython can miss the wake-up of an unbounded wait (a signal on another thread)
        try:
            stops.get(timeout=1.0)
            break
        except queue.Empty:
            continue
    server.shutdown()
    server.server_close()
    relay.stop()
    return 0

"""`npu-watchdog check-config`: validate a config and print it, effective and redacted."""

from __future__ import annotations

import argparse
import json
import sys


from watchdog.commands import add_config_arg, load_config_or_report


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("check-config", help="validate a config file and print the effective config (secrets redacted)")
    add_config_arg(p)
    p.add_argument("--json", action="store_true", help="print the effective config as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing when valid")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from watchdog.config import redacted_dump

    config = load_config_or_report(args.config)
    if config is None:
        return 2
    from watchdog.config.pathcheck import unmatched_paths

    from watchdog.config.placeholders import placeholders

    for line in unmatched_paths(config):
        print(f"warning: {line}", file=sys.stderr)
    for ph in placeholders(config):
        print(f"warning: {ph.line()}", file=sys.stderr)
    if args.quiet:
        return 0
    from watchdog.discovery.plan import describe

    data = redacted_dump(config)
    which = describe(config.feeds)
    if args.json:
        print(json.dumps({**data, "discovery_feeds": which}, indent=2, ensure_ascii=False))
    else:
        print(f"# {args.config}: valid. Effective config (durations in seconds, sizes in bytes):")
        import yaml

        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
        print("# Which settings apply to each probe discovery can feed:")
        for probe, text in which.items():
            print(f"#   probes.{probe}: {text}")
    return 0

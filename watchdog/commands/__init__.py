"""One module per CLI subcommand; see watchdog.cli.COMMAND_MODULES."""

from __future__ import annotations

import argparse

from watchdog.config import DEFAULT_CONFIG_PATH


def add_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", default=DEFAULT_CONFIG_PATH,
                   help=f"config file (default {DEFAULT_CONFIG_PATH})")

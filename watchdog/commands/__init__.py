"""One module per CLI subcommand; watchdog.cli registers them (`build_parser`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Optional

from watchdog.service.defaults import DEFAULT_CONFIG_PATH

if TYPE_CHECKING:
    from watchdog.config import Config


def add_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", default=DEFAULT_CONFIG_PATH,
                   help=f"config file (default {DEFAULT_CONFIG_PATH})")


def load_config_or_report(path: str) -> "Optional[Config]":
    """Load and validate the config; on errors print them to stderr and return None (exit 2)."""
    from watchdog.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return None

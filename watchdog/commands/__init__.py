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


def log_for(config: object, level: str, fmt: str) -> None:
    """Set up logging for a command that loaded `config`: every line it logs (its own, or a
    library's that quotes a URL) passes the config's secrets' redaction. Every command that logs
    after loading a config goes through here, so none logs unredacted."""
    from watchdog.privacy.redact import Redactor, config_secrets
    from watchdog.service.logsetup import redact_with, setup_logging

    setup_logging(level, fmt)
    redact_with(Redactor(config_secrets(config)).known)


def config_or_defaults(path: str) -> "Optional[Config]":
    """For commands that talk to a running daemon (`status`, `silence`): the config at `path`, or,
    where there is no file at the default path, the defaults (said on stderr), so the answer is
    about the daemon (not reachable, no state) rather than "invalid config". A file named with
    -c that does not exist, or does not validate, is still an error."""
    import os

    if path == DEFAULT_CONFIG_PATH and not os.path.exists(path):
        from watchdog.config.load import load_config_text

        print(f"npu-watchdog: no config at {path}; using the defaults (-c FILE names the daemon's config)",
              file=sys.stderr)
        return load_config_text("{}", "<defaults>")
    return load_config_or_report(path)

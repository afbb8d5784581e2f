"""Defaults that the command line needs before any config is loaded.

Kept apart from the config schema so `npu-watchdog --help` and `--version` do not import pydantic
(that alone took most of a 0.4 s start).
"""

DEFAULT_CONFIG_PATH = "/etc/npu-watchdog/config.yaml"
DEFAULT_PORT = 9841
DEFAULT_RELAY_CONFIG = "/etc/npu-watchdog/relay.yaml"

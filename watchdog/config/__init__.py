"""Configuration: schema (per-section modules), loading, `${ENV}`/`*_file` resolution, redaction."""

from watchdog.config.load import ConfigError, load_config, load_config_text, redacted_dump
from watchdog.config.schema import Config
from watchdog.service.defaults import DEFAULT_CONFIG_PATH, DEFAULT_PORT

__all__ = [
    "Config", "ConfigError", "DEFAULT_CONFIG_PATH", "DEFAULT_PORT",
    "load_config", "load_config_text", "redacted_dump",
]

"""npu-smi: pure parsers (`parse`), the command runner (`run`).

Parsing is kept apart from running so every generation's output is tested on real captures
without a device; the runner is tested against a fake npu-smi that replays those captures.
"""

from watchdog.npusmi.parse import (
    ChipMapEntry,
    HealthInfo,
    NpuSmiError,
    NpuSmiParseError,
    NpuSmiUnavailable,
    detect_failure,
    parse_chip_map,
    parse_health,
    parse_info,
)

__all__ = [
    "ChipMapEntry", "HealthInfo", "NpuSmiError", "NpuSmiParseError", "NpuSmiUnavailable",
    "detect_failure", "parse_chip_map", "parse_health", "parse_info",
]

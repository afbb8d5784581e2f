"""Duration strings (`30s`, `5m`, `1h30m`, `250ms`, `2d`) -> seconds.

Its own import-light module because the log rule packs need it too: `npu-watchdog scan` loads the
packs without a config, and importing the config package (pydantic) would cost it a fifth of a
second before the first byte is read. `watchdog.config.types` re-exports these names.
"""

from __future__ import annotations

import math
import re
from typing import Any

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_FULL = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

#: Longest duration accepted: beyond it a value is a typo, and infinity breaks every timer.
MAX_DURATION_SECONDS = 10 * 365 * 86400.0
#: Longer duration strings are refused before any regex or float conversion runs.
_MAX_VALUE_CHARS = 64


def parse_duration(value: Any) -> float:
    """Parse `30s`, `5m`, `1h30m`, `250ms`, `2d` into seconds (float)."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError("expected a duration like 30s or 5m")
    text = value.strip()
    if len(text) > _MAX_VALUE_CHARS or not _DURATION_FULL.match(text):
        raise ValueError("expected a duration like 30s or 5m")
    seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    if not math.isfinite(seconds) or seconds > MAX_DURATION_SECONDS:
        raise ValueError("duration longer than 10 years")
    return seconds

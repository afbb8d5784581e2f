"""Config of the stall detectors (filled in by their feature)."""

from __future__ import annotations

from watchdog.config.types import StrictModel


class StallConfig(StrictModel):
    """Thresholds with documented defaults; all time-based."""

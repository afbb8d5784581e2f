"""Config of the trends detectors (filled in by their feature)."""

from __future__ import annotations

from watchdog.config.types import StrictModel


class TrendsConfig(StrictModel):
    """Thresholds with documented defaults; all time-based."""

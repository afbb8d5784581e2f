"""Config of the preflight `doctor` command (filled in by the doctor feature)."""

from __future__ import annotations

from watchdog.config.types import StrictModel


class DoctorConfig(StrictModel):
    """Paths and thresholds of the preflight checks."""

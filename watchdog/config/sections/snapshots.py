"""Config of failure snapshots (filled in by the snapshot feature)."""

from __future__ import annotations

from watchdog.config.types import StrictModel


class SnapshotsConfig(StrictModel):
    """Failure snapshots are off until configured."""

    enabled: bool = False

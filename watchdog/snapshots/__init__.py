"""Failure snapshots: the evidence bundle taken when a finding fires (built by its feature).

Contract with the alert engine: the engine calls `taker.request(finding)` for each finding that
starts firing; the taker decides by its own config whether to capture (severity, per-rule
settings, rate limits, disk floor), starts the capture in the background and returns at once the
path the archive will have (so the alert can name it), or None when it takes none.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from watchdog.findings import Finding


class SnapshotTaker(Protocol):
    def request(self, finding: Finding) -> Optional[str]: ...

    def close(self) -> None: ...


def build_snapshot_taker(config: Any, runtime: Any) -> Optional[SnapshotTaker]:
    """The daemon's snapshot taker, or None when snapshots are disabled (until built: always None)."""
    return None

"""Failure snapshots: the evidence bundle taken when a finding fires.

Contract with the alert engine: the engine calls `taker.request(finding)` for each finding that
starts firing; the taker decides by its own config whether to capture (severity, per-rule
settings, rate limits, disk floor), starts the capture in the background and returns at once the
path the archive will have (so the alert can name it), or None when it takes none.

Modules: `taker` (admission and capture), `collect`/`procs` (what goes in), `bundle` (budgeted
parallel collection, archive writing), `retention` (count/bytes/age, disk floor); secrets are
replaced by watchdog.privacy.redact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # the package's own class; importing it here would load the capture machinery
    from watchdog.snapshots.taker import SnapshotTaker


def build_snapshot_taker(config: Any, runtime: Any) -> Optional["SnapshotTaker"]:
    """The daemon's snapshot taker, or None when `snapshots.enabled` is false.

    Enabling or disabling snapshots takes effect at the next restart; the other settings follow
    config reloads (the taker reads them through `runtime.config`).
    """
    if not config.snapshots.enabled:
        return None
    from watchdog.snapshots.taker import SnapshotTaker  # lazy: no capture code without snapshots

    return SnapshotTaker(config, runtime)

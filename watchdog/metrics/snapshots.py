"""Metrics of failure snapshots: taken/failed/skipped, skip reasons, bytes on disk, last duration.

Every label value is emitted from the start at 0 (also when snapshots are disabled), so rate()
and alerts on these counters work from the daemon's first scrape.
"""

from __future__ import annotations

from typing import Any, Iterator, List

from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.snapshots.taker import RESULTS, SKIP_REASONS

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 80

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_snapshots_total", "counter", ("result",),
              "Failure snapshots by result: taken (archive complete), failed (could not be written), "
              "skipped (wanted but not taken; see npu_watchdog_snapshots_skipped_total)."),
    MetricDef("npu_watchdog_snapshots_skipped_total", "counter", ("reason",),
              "Snapshots skipped, by reason: rate_limited (one per rule and job per min_interval), "
              "low_disk (below snapshots.min_free_space), busy (max_concurrent reached), "
              "unavailable (snapshot directory unusable)."),
    MetricDef("npu_watchdog_snapshot_disk_bytes", "gauge", (),
              "Bytes of snapshot archives kept in the snapshot directory."),
    MetricDef("npu_watchdog_snapshot_last_duration_seconds", "gauge", (),
              "Duration of the last snapshot capture, collection and archive writing (0 if none yet)."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    taker = rt.snapshots
    stats = taker.stats() if taker is not None else {}
    results = stats.get("results", {})
    skipped = stats.get("skipped", {})
    for r in RESULTS:
        yield MetricSample("npu_watchdog_snapshots_total", {"result": r}, results.get(r, 0))
    for reason in SKIP_REASONS:
        yield MetricSample("npu_watchdog_snapshots_skipped_total", {"reason": reason}, skipped.get(reason, 0))
    yield MetricSample("npu_watchdog_snapshot_disk_bytes", {}, stats.get("disk_bytes", 0))
    yield MetricSample("npu_watchdog_snapshot_last_duration_seconds", {}, stats.get("last_duration", 0.0))

"""Metrics of discovery: what it found on the node and what a scan costs.

Read from the shared discovery result (the last scan); a scrape never scans.
"""

from __future__ import annotations

from typing import Any, Iterator, List

from watchdog.core.findings import JOB_LABEL
from watchdog.metrics.catalog import MetricDef, MetricSample

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 100

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_discovered_ranks", "gauge", (JOB_LABEL,),
              "Ranks discovery found in each training job on this node (launchers and helper processes excluded)."),
    MetricDef("npu_watchdog_discovery_scans_total", "counter", (), "Discovery scans of the process table."),
    MetricDef("npu_watchdog_discovery_errors_total", "counter", (), "Discovery scans that failed."),
    MetricDef("npu_watchdog_discovery_scan_duration_seconds", "gauge", (),
              "Wall time of the last discovery scan."),
    MetricDef("npu_watchdog_discovery_processes", "gauge", (),
              "Processes the last scan looked at (kernel threads excluded)."),
    MetricDef("npu_watchdog_discovery_processes_skipped", "gauge", (),
              "Processes the last scan left out because what procfs shows of them (another user's environment "
              "or record) could not be parsed."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    feed = rt.discovery
    if feed is None:
        return
    yield MetricSample("npu_watchdog_discovery_scans_total", {}, feed.scans_total)
    yield MetricSample("npu_watchdog_discovery_errors_total", {}, feed.errors_total)
    found = feed.latest()
    if found is None:
        return
    yield MetricSample("npu_watchdog_discovery_scan_duration_seconds", {}, found.duration_seconds)
    yield MetricSample("npu_watchdog_discovery_processes", {}, found.processes_scanned)
    yield MetricSample("npu_watchdog_discovery_processes_skipped", {}, found.skipped)
    for job in found.jobs:
        yield MetricSample("npu_watchdog_discovered_ranks", {JOB_LABEL: job.name}, len(job.ranks))

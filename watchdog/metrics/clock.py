"""The wall clock as the daemon sees it: steps (a VM resumed, chrony stepping a clock that was
wrong at boot) do not move its durations (watchdog.host.clock), and are shown here besides the
journal's one line per step."""

from __future__ import annotations

from typing import Any, Iterator

from watchdog.host.clock import CLOCK
from watchdog.metrics.catalog import MetricDef, MetricSample

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 15

METRICS = [
    MetricDef("npu_watchdog_clock_steps_total", "counter", (),
              "Steps of the wall clock seen since start (more than 2 s between two looks); alert lifetimes, "
              "holds, retries and heartbeat ages are kept on the monotonic clock."),
    MetricDef("npu_watchdog_clock_offset_seconds", "gauge", (),
              "Seconds the wall clock is ahead of the daemon's clock (negative: behind): the sum of the steps "
              "since start. The *_timestamp_seconds metrics are on the daemon's clock."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    yield MetricSample("npu_watchdog_clock_steps_total", {}, CLOCK.steps_total)
    yield MetricSample("npu_watchdog_clock_offset_seconds", {}, CLOCK.offset())

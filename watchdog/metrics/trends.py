"""Metrics of the trends feature (declared by that feature)."""

from __future__ import annotations

from typing import Any, Iterator, List

from watchdog.metrics.catalog import MetricDef, MetricSample

METRICS: List[MetricDef] = []


def samples(rt: Any) -> Iterator[MetricSample]:
    return iter(())

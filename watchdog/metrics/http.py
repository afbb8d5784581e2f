"""Metrics of the HTTP endpoint's connection guard (see watchdog.http.server and fdbudget)."""

from __future__ import annotations

from typing import Any, Iterator

from watchdog.metrics.catalog import MetricDef, MetricSample

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 90

METRICS = [
    MetricDef("npu_watchdog_http_connections", "gauge", (),
              "HTTP connections open now (this scrape's included)."),
    MetricDef("npu_watchdog_http_connections_limit", "gauge", (),
              "HTTP connections allowed at once (http.max_connections, lowered to keep the probes' descriptors)."),
    MetricDef("npu_watchdog_http_connections_dropped_total", "counter", ("reason",),
              "Connections closed at the cap: evicted (idle, no complete request) or refused (every slot busy)."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    http = rt.http
    if http is None:
        return
    st = http.connection_stats()
    yield MetricSample("npu_watchdog_http_connections", {}, st["open"])
    yield MetricSample("npu_watchdog_http_connections_limit", {}, st["limit"])
    for reason in ("evicted", "refused"):
        yield MetricSample("npu_watchdog_http_connections_dropped_total", {"reason": reason}, st["dropped"].get(reason, 0))

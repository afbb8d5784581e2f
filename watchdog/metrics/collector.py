"""A prometheus-client custom collector that builds fresh metric families on every scrape.

Values come from the feature modules' `samples(runtime)`, which read cached state only. Series of
a device or rank that disappeared therefore vanish unless the feature keeps them on purpose (e.g.
at a "missing" value). A feature whose sampling raises is logged and counted, and its families are
still served empty rather than failing the whole scrape.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Iterator, List

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from watchdog.metrics.catalog import MetricDef, all_metrics, metric_modules

log = logging.getLogger(__name__)


class WatchdogCollector(Collector):
    def __init__(self, runtime: Any):
        self.runtime = runtime
        self.defs: Dict[str, MetricDef] = {d.name: d for d in all_metrics()}
        self._modules = metric_modules()
        self._lock = threading.Lock()
        self.sample_errors = 0

    def describe(self) -> List[Any]:
        # Without describe(), registering would call collect() before the daemon has state.
        return []

    def collect(self) -> Iterator[Any]:
        families: Dict[str, Any] = {}
        for d in self.defs.values():
            if d.type == "counter":
                families[d.name] = CounterMetricFamily(d.name, d.help, labels=list(d.labels))
            else:
                families[d.name] = GaugeMetricFamily(d.name, d.help, labels=list(d.labels))
        for mod in self._modules:
            try:
                samples = list(mod.samples(self.runtime))
            except Exception:
                with self._lock:
                    self.sample_errors += 1
                log.exception("metrics of %s could not be sampled", mod.__name__)
                continue
            for s in samples:
                d = self.defs.get(s.name)
                if d is None:
                    log.error("metric %s is not in the metric table; sample dropped", s.name)
                    continue
                if tuple(sorted(s.labels)) != tuple(sorted(d.labels)):
                    log.error("metric %s: labels %s do not match the table %s; sample dropped",
                              s.name, sorted(s.labels), list(d.labels))
                    continue
                families[s.name].add_metric([str(s.labels[k]) for k in d.labels], float(s.value))
        yield from families.values()


def evaluated_metrics(view: Any, config: Any) -> Dict[str, List[Any]]:
    """Per metric module that declares `evaluate(view, config)`: its samples as of this detector
    pass (the daemon publishes them on the runtime; `samples(rt)` serves them at scrape time)."""
    out: Dict[str, List[Any]] = {}
    for mod in metric_modules():
        fn = getattr(mod, "evaluate", None)
        if fn is None:
            continue
        try:
            out[mod.__name__] = list(fn(view, config))
        except Exception:
            log.exception("metrics of %s could not be evaluated", mod.__name__)
    return out


def make_registry(runtime: Any) -> CollectorRegistry:
    """A private registry (no default process/gc collectors: our names, our table)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchdogCollector(runtime))
    return registry

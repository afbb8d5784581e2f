"""The Prometheus text exposition of the metric table, rendered directly on every scrape.

Values come from the feature modules' `samples(runtime)`, which read cached state only. Series of
a device or rank that disappeared therefore vanish unless the feature keeps them on purpose (e.g.
at a "missing" value). A feature whose sampling raises is logged, and its families are still
served empty rather than failing the whole scrape.

Rendered here, not through prometheus-client (not a dependency): its families and exposition cost
more CPU per scrape than node_exporter's whole scrape at 64 ranks, and every label set is already
checked against the table (docs/architecture.md, "Runtime dependencies"). The text is byte for byte
what prometheus-client writes for the same samples (tests/unit/test_exposition.py).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Dict, List, Tuple

from watchdog.metrics.catalog import EVALUATORS, MetricDef, all_metrics, metric_modules

log = logging.getLogger(__name__)

#: The text format's media type (version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def format_value(v: float) -> str:
    """A sample value as Prometheus writes it (Go's float formatting)."""
    if -1e6 < v < 1e6:  # the common case: Python's repr is Go's here
        return repr(v)
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    s = repr(float(v))
    dot = s.find(".")
    if v > 0 and dot > 6 and "e" not in s:  # Go switches to an exponent sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0").rstrip(".")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escape_label(v: str) -> str:
    if "\\" not in v and '"' not in v and "\n" not in v:
        return v
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


class WatchdogCollector:
    """Renders every metric of the table from the feature modules' samples."""

    def __init__(self, runtime: Any):
        self.runtime = runtime
        self.defs: Dict[str, MetricDef] = {d.name: d for d in all_metrics()}
        self._heads = {d.name: f"# HELP {d.name} {_escape_help(d.help)}\n# TYPE {d.name} {d.type}\n"
                       for d in self.defs.values()}
        #: Label names in the order they are served: sorted, as prometheus-client served them.
        self._order = {d.name: tuple(sorted(d.labels)) for d in self.defs.values()}
        self._labelsets = {d.name: frozenset(d.labels) for d in self.defs.values()}
        self._modules = metric_modules()
        #: (metric, label values) -> the series' text before its value, from the last render.
        #: Why: nearly every series of a scrape was served by the one before (hosts, jobs,
        #: ranks and NPUs change rarely), and escaping and joining its labels again was most of a
        #: render's CPU. Only the last render's series are kept, so it never outgrows the series.
        self._series: Dict[Tuple[Any, ...], str] = {}

    def render(self) -> bytes:
        lines: Dict[str, List[str]] = {name: [] for name in self.defs}
        seen: Dict[Tuple[Any, ...], str] = {}
        known = self._series  # (another scrape's thread may render at the same time)
        for mod in self._modules:
            try:
                samples = list(mod.samples(self.runtime))
            except Exception:
                log.exception("metrics of %s could not be sampled", mod.__name__)
                continue
            for name, labels, value in samples:
                body = lines.get(name)
                if body is None:
                    log.error("metric %s is not in the metric table; sample dropped", name)
                    continue
                if labels.keys() != self._labelsets[name]:
                    log.error("metric %s: labels %s do not match the table %s; sample dropped",
                              name, sorted(labels), list(self.defs[name].labels))
                    continue
                text = format_value(float(value))
                if labels:
                    order = self._order[name]
                    key = (name, *[str(labels[k]) for k in order])
                    head = known.get(key)
                    if head is None:
                        pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in zip(order, key[1:]))
                        head = f"{name}{{{pairs}}} "
                    seen[key] = head
                    body.append(f"{head}{text}\n")
                else:
                    body.append(f"{name} {text}\n")
        self._series = seen
        return "".join(self._heads[name] + "".join(body) for name, body in lines.items()).encode("utf-8")


def evaluated_metrics(view: Any, config: Any) -> Dict[str, List[Any]]:
    """Per metric module that declares `evaluate(view, config)`: its samples as of this detector
    pass (the daemon publishes them on the runtime; `samples(rt)` serves them at scrape time)."""
    out: Dict[str, List[Any]] = {}
    for name, fn in EVALUATORS.get():
        try:
            out[name] = list(fn(view, config))
        except Exception:
            log.exception("metrics of %s could not be evaluated", name)
    return out


def make_registry(runtime: Any) -> WatchdogCollector:
    """What the HTTP endpoint renders /metrics from (no default process/gc metrics: our table)."""
    return WatchdogCollector(runtime)

"""The table of every metric the daemon can export, assembled from one module per feature.

Each feature module in `watchdog.metrics` declares `METRICS` (its rows of the table), `ORDER`
(where its rows go) and `samples(runtime)` (the current values, read from cached state: a scrape
never runs a probe). A probe module (`watchdog.probes`) may declare its own `METRICS` and
`samples(runtime)` the same way: its rows follow the feature modules', in the probes' order. Both
lists are the composition root's (`watchdog.plugins_list`), which hands them down with `install`;
adding a probe with metrics edits nothing here. One table
means one place to check names, types, labels and help, and a test compares it with what
`/metrics` really serves.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Sequence, Tuple

from watchdog.core.metricdef import TARGET_LABELS, MetricDef, MetricSample
from watchdog.core.plugins import Slot

__all__ = ["TARGET_LABELS", "MetricDef", "MetricSample", "all_metrics", "install", "metric_modules", "render_table"]


#: The modules contributing metrics, in table order (feature modules by `ORDER`, then the probe
#: modules that declare metrics, in probe `ORDER`), handed down by the composition root.
METRIC_MODULES: Slot[Tuple[Any, ...]] = Slot("the metric modules")


#: (module name, its `evaluate(view, config)`) of the metric modules whose values need a detector
#: pass's judgement, run once per pass (`watchdog.metrics.collector.evaluated_metrics`).
EVALUATORS: Slot[Tuple[Tuple[str, Callable[[Any, Any], Iterable[Any]]], ...]] = Slot("the metric evaluators")


def install(modules: Sequence[Any], evaluators: Sequence[Any] = ()) -> None:
    """The metric modules in table order, and those of them that declare `evaluate`."""
    METRIC_MODULES.fill(tuple(modules))
    EVALUATORS.fill(tuple((m.__name__, m.evaluate) for m in evaluators))


def metric_modules() -> List[Any]:
    """The modules contributing metrics (each has `METRICS` and `samples(runtime)`), table order."""
    return list(METRIC_MODULES.get())


def all_metrics() -> List[MetricDef]:
    """Every metric, in table order; duplicate names are a programming error."""
    out: List[MetricDef] = []
    seen = set()
    for mod in metric_modules():
        for d in mod.METRICS:
            if d.name in seen:
                raise ValueError(f"metric {d.name} declared twice")
            seen.add(d.name)
            out.append(d)
    return out


def render_table(defs: Iterable[MetricDef]) -> str:
    """Markdown table of the metrics (docs/metrics.md, rewritten by `make docs`)."""
    rows = ["| name | type | labels | help |", "|---|---|---|---|"]
    for d in defs:
        rows.append(f"| `{d.name}` | {d.type} | {', '.join(d.labels) or '-'} | {d.help} |")
    return "\n".join(rows)

"""The table of every metric the daemon can export, assembled from one module per feature.

Each feature module in `watchdog.metrics` declares `METRICS` (its rows of the table) and
`samples(runtime)` (the current values, read from cached state: a scrape never runs a probe).
One table means one place to check names, types, labels and help, and a test compares it with
what `/metrics` really serves.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, NamedTuple, Tuple

#: Feature modules contributing metrics (each has METRICS and samples()).
METRIC_MODULES = (
    "watchdog.metrics.core",
    "watchdog.metrics.liveness",
    "watchdog.metrics.npu",
    "watchdog.metrics.trends",
    "watchdog.metrics.logs",
    "watchdog.metrics.kernel",
    "watchdog.metrics.alerting",
    "watchdog.metrics.snapshots",
    "watchdog.metrics.http",
    "watchdog.metrics.discovery",
)

_NAME = re.compile(r"^npu_watchdog_[a-z0-9_]+$")
#: Labels Prometheus sets on every scraped series: ours would arrive renamed to `exported_*`.
TARGET_LABELS = ("job", "instance")


@dataclass(frozen=True)
class MetricDef:
    """One row of the metric table. `name` is the exposed name (counters end in `_total`)."""

    name: str
    type: str  # "gauge" | "counter"
    labels: Tuple[str, ...]
    help: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"metric {self.name!r} must match {_NAME.pattern}")
        if self.type not in ("gauge", "counter"):
            raise ValueError(f"metric {self.name}: unknown type {self.type!r}")
        if (self.type == "counter") != self.name.endswith("_total"):
            raise ValueError(f"metric {self.name}: counters, and only counters, end in _total")
        clash = sorted(set(self.labels) & set(TARGET_LABELS))
        if clash:
            raise ValueError(f"metric {self.name}: label(s) {', '.join(clash)} belong to Prometheus's "
                             "scrape target (the training job is `training_job`)")


class MetricSample(NamedTuple):
    name: str
    labels: Dict[str, str]
    value: float


def metric_modules() -> List[Any]:
    return [importlib.import_module(m) for m in METRIC_MODULES]


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

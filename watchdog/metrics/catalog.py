"""The table of every metric the daemon can export, assembled from one module per feature.

Each feature module in `watchdog.metrics` declares `METRICS` (its rows of the table), `ORDER`
(where its rows go) and `samples(runtime)` (the current values, read from cached state: a scrape
never runs a probe). A probe module (`watchdog.probes`) may declare its own `METRICS` and
`samples(runtime)` the same way: its rows follow the feature modules', in the probes' order. Both
lists are found, never written down, so adding a probe with metrics edits nothing here. One table
means one place to check names, types, labels and help, and a test compares it with what
`/metrics` really serves.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, Iterable, List, NamedTuple, Tuple

#: The package of the feature modules, and the package of the probes (whose modules may declare
#: metrics of their own).
FEATURE_PACKAGE = "watchdog.metrics"
PROBE_PACKAGE = "watchdog.probes"

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


def _declaring(package: str) -> List[Tuple[int, str, Any]]:
    """(ORDER, name, module) of every module of `package` that declares `METRICS` and `ORDER`."""
    pkg = importlib.import_module(package)
    out = []
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{package}.{info.name}")
        if isinstance(getattr(mod, "METRICS", None), list) and isinstance(getattr(mod, "ORDER", None), int):
            out.append((mod.ORDER, mod.__name__, mod))
    return sorted(out, key=lambda t: t[:2])


@lru_cache(maxsize=None)
def _metric_module_names() -> Tuple[str, ...]:
    """Feature modules in ORDER, then the probe modules that declare metrics, in probe ORDER.
    Found once per process (a scrape or a detector pass never lists a folder)."""
    return tuple(name for _, name, _ in _declaring(FEATURE_PACKAGE) + _declaring(PROBE_PACKAGE))


def metric_modules() -> List[Any]:
    """The modules contributing metrics (each has `METRICS` and `samples(runtime)`), table order."""
    return [importlib.import_module(m) for m in _metric_module_names()]


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

"""A row of the metric table and a sample of it: records a probe module may declare its metrics
with (it sits below the metrics layer, so it imports them from here); `watchdog.metrics.catalog`
assembles the table from every module's rows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, NamedTuple, Tuple

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



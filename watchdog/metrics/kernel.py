"""Metrics of the kernel probe: records read, rule matches, records lost, read position saved."""

from __future__ import annotations

from typing import Any, Iterator, List, Tuple

from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.observations import KERNEL, KernelObservation
from watchdog.logrules.kernel import kernel_ruleset

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 60

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_kernel_records_total", "counter", (),
              "Kernel log records (/dev/kmsg) judged since the daemon started."),
    MetricDef("npu_watchdog_kernel_matches_total", "counter", ("rule", "category"),
              "Kernel log records that matched a kernel rule, since the daemon started."),
    MetricDef("npu_watchdog_kernel_records_lost_total", "counter", (),
              "Kernel log records overwritten by the kernel before they were read (also while the daemon was down)."),
    MetricDef("npu_watchdog_kernel_records_malformed_total", "counter", (),
              "Kernel log records not in the /dev/kmsg format (skipped)."),
    MetricDef("npu_watchdog_kernel_position_saved", "gauge", (),
              "1 if the last save of the kernel log read position succeeded, else 0."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    cfg = rt.config.probes.kernel
    if not cfg.enabled:
        return
    sample = rt.state.latest(KERNEL)
    obs = sample.value if sample is not None else KernelObservation()  # before the first round: zeros
    yield MetricSample("npu_watchdog_kernel_records_total", {}, obs.records_total)
    yield MetricSample("npu_watchdog_kernel_records_lost_total", {}, obs.lost_total)
    yield MetricSample("npu_watchdog_kernel_records_malformed_total", {}, obs.malformed_total)
    yield MetricSample("npu_watchdog_kernel_position_saved", {}, 0 if obs.state_error else 1)
    matches = obs.matches_total
    for rid, category in _rules(cfg):
        yield MetricSample("npu_watchdog_kernel_matches_total", {"rule": rid, "category": category},
                           matches.get(rid, 0))


_cache: Tuple[Any, tuple] = (None, ())


def _rules(cfg: Any) -> tuple:
    """(id, category) of the configured kernel rules, rebuilt only when the config changes."""
    global _cache
    if _cache[0] is not cfg:
        rules = kernel_ruleset(cfg.disable, [r.as_rule_data() for r in cfg.rules])
        _cache = (cfg, tuple((k.rule.id, k.rule.category) for k in rules))
    return _cache[1]

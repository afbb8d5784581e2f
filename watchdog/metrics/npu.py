"""Metrics of the npu probe: per-chip readings of the last `npu-smi info`, node counts, npu-smi itself.

Series rules (why): a chip that disappears keeps its `health` series at -1 and its `_info` series,
so an alert on `npu_watchdog_npu_health == -1` fires instead of the series silently vanishing.
While npu-smi cannot be read (the probe is down) the last readings are not served as if current:
per-chip value gauges are left out, health reads 4 (unknown), and the node counts are left out
(a blind watcher must not report "0 NPUs").
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.npusmi.run import REASONS, STATS
from watchdog.observations import NpuChip, NpuObservation

CHIP = ("npu", "chip")
MB = 1024 * 1024

#: npu-smi health word -> numeric code (see the HELP of npu_watchdog_npu_health).
HEALTH_CODES = {"ok": 0, "warning": 1, "alarm": 2, "critical": 3}
HEALTH_UNKNOWN = 4
HEALTH_MISSING = -1

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 30

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_npu_aicore_utilization_ratio", "gauge", CHIP,
              "AI Core utilization of the chip (0-1), from npu-smi AICore(%)."),
    MetricDef("npu_watchdog_npu_hbm_used_bytes", "gauge", CHIP,
              "HBM used on the chip (npu-smi HBM-Usage used); absent on chips without HBM (310 family)."),
    MetricDef("npu_watchdog_npu_hbm_total_bytes", "gauge", CHIP,
              "HBM capacity of the chip (npu-smi HBM-Usage total)."),
    MetricDef("npu_watchdog_npu_memory_used_bytes", "gauge", CHIP,
              "DDR used on the chip (npu-smi Memory-Usage used; 0 on 910B/A3 where HBM holds the data)."),
    MetricDef("npu_watchdog_npu_memory_total_bytes", "gauge", CHIP,
              "DDR capacity of the chip (npu-smi Memory-Usage total)."),
    MetricDef("npu_watchdog_npu_temperature_celsius", "gauge", CHIP,
              "Chip temperature in degrees Celsius."),
    MetricDef("npu_watchdog_npu_power_watts", "gauge", CHIP,
              "Power draw in watts; absent where npu-smi prints NA or - (310P, second die of an A3 NPU)."),
    MetricDef("npu_watchdog_npu_health", "gauge", CHIP,
              "npu-smi health of the chip: 0 OK, 1 Warning, 2 Alarm, 3 Critical, 4 other/unknown "
              "(also while npu-smi cannot be read), -1 missing (seen earlier, gone from npu-smi now)."),
    MetricDef("npu_watchdog_npu_processes", "gauge", CHIP,
              "Processes npu-smi lists on the chip."),
    MetricDef("npu_watchdog_npu_info", "gauge", CHIP + ("name", "bus_id", "device_id", "version"),
              "Always 1; chip name, PCIe bus id, device id (Device/Phy-ID column) and npu-smi version."),
    MetricDef("npu_watchdog_npus_seen", "gauge", (),
              "Chips (logical devices) listed by the last successful npu-smi info."),
    MetricDef("npu_watchdog_npus_healthy", "gauge", (),
              "Chips whose npu-smi health is OK in the last successful npu-smi info."),
    MetricDef("npu_watchdog_npus_missing", "gauge", (),
              "Chips seen earlier by this daemon and absent from the last npu-smi info."),
    MetricDef("npu_watchdog_npu_smi_duration_seconds", "gauge", (),
              "Duration of the last npu-smi info call (successful or not)."),
    MetricDef("npu_watchdog_npu_smi_failures_total", "counter", ("reason",),
              "Failed npu-smi calls by reason: timeout (killed), exit (non-zero), parse (unreadable "
              "output), unavailable (failure text such as dcmi ... ret is -8020), missing (not installed)."),
]


def health_code(word: str) -> int:
    return HEALTH_CODES.get(word.strip().lower(), HEALTH_UNKNOWN)


def _labels(c: NpuChip) -> Dict[str, str]:
    return {"npu": str(c.npu), "chip": str(c.chip)}


def _info(c: NpuChip, version: Optional[str]) -> MetricSample:
    return MetricSample("npu_watchdog_npu_info", {
        **_labels(c), "name": c.name, "bus_id": c.bus_id or "",
        "device_id": "" if c.device_id is None else str(c.device_id), "version": version or ""}, 1)


def chip_samples(obs: NpuObservation, up: bool = True) -> Iterator[MetricSample]:
    """Per-chip and node samples of one observation (pure: tested without a daemon)."""
    procs: Dict[Tuple[int, int], int] = {}
    for p in obs.processes:
        procs[(p.npu, p.chip)] = procs.get((p.npu, p.chip), 0) + 1
    for c in obs.chips:
        lab = _labels(c)
        yield _info(c, obs.version)
        yield MetricSample("npu_watchdog_npu_health", lab, health_code(c.health) if up else HEALTH_UNKNOWN)
        if not up:
            continue
        if obs.processes_known:  # no process table: unknown, never a made-up 0
            yield MetricSample("npu_watchdog_npu_processes", lab, procs.get((c.npu, c.chip), 0))
        if c.aicore_util_pct is not None:
            yield MetricSample("npu_watchdog_npu_aicore_utilization_ratio", lab, c.aicore_util_pct / 100.0)
        for name, value in (
            ("npu_watchdog_npu_hbm_used_bytes", c.hbm_used_mb),
            ("npu_watchdog_npu_hbm_total_bytes", c.hbm_total_mb),
            ("npu_watchdog_npu_memory_used_bytes", c.memory_used_mb),
            ("npu_watchdog_npu_memory_total_bytes", c.memory_total_mb),
        ):
            if value is not None:
                yield MetricSample(name, lab, value * MB)
        if c.temp_c is not None:
            yield MetricSample("npu_watchdog_npu_temperature_celsius", lab, c.temp_c)
        if c.power_w is not None:
            yield MetricSample("npu_watchdog_npu_power_watts", lab, c.power_w)
    present = {(c.npu, c.chip) for c in obs.chips}
    missing = [c for c in obs.missing if (c.npu, c.chip) not in present]
    for c in missing:
        yield _info(c, obs.version)
        yield MetricSample("npu_watchdog_npu_health", _labels(c), HEALTH_MISSING)
        yield MetricSample("npu_watchdog_npu_processes", _labels(c), 0)
    if up:
        yield MetricSample("npu_watchdog_npus_seen", {}, len(obs.chips))
        yield MetricSample("npu_watchdog_npus_healthy", {}, sum(1 for c in obs.chips if health_code(c.health) == 0))
        yield MetricSample("npu_watchdog_npus_missing", {}, len(missing))


def samples(rt: Any) -> Iterator[MetricSample]:
    cfg = rt.config.probes.npu
    if not cfg.enabled:
        return
    stats = STATS.snapshot()
    for reason in REASONS:
        yield MetricSample("npu_watchdog_npu_smi_failures_total", {"reason": reason}, stats.failures.get(reason, 0))
    if stats.last_duration is not None:
        yield MetricSample("npu_watchdog_npu_smi_duration_seconds", {}, stats.last_duration)
    latest = rt.state.latest("npu")
    if latest is None:
        return
    status = rt.state.status("npu")
    yield from chip_samples(latest.value, up=bool(status and status.up))

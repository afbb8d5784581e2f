"""Metrics of the subhealth probe: ECC counters, retired pages, AI Core clock and health codes per
chip (npu-exporter's names where it has one, with the npu_watchdog_ prefix, in base units)."""

from __future__ import annotations

from typing import Any, Iterator, List, Optional

from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.probes.subhealth import SUBHEALTH, SubhealthObservation

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 64

_CHIP = ("npu", "chip")
METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_chip_info_hbm_ecc_single_bit_error_cnt", "gauge", _CHIP,
              "Single-bit (corrected) ECC errors the driver counts now, HBM and DDR "
              "(npu-exporter's npu_chip_info_hbm_ecc_single_bit_error_cnt)."),
    MetricDef("npu_watchdog_chip_info_hbm_ecc_double_bit_error_cnt", "gauge", _CHIP,
              "Double-bit (uncorrectable) ECC errors the driver counts now "
              "(npu-exporter's npu_chip_info_hbm_ecc_double_bit_error_cnt)."),
    MetricDef("npu_watchdog_chip_ecc_isolated_pages", "gauge", _CHIP + ("kind",),
              "Memory pages the driver retired after ECC errors (kind: single_bit, double_bit)."),
    MetricDef("npu_watchdog_chip_info_aicore_current_freq_hertz", "gauge", _CHIP,
              "AI Core clock now (npu-exporter's npu_chip_info_aicore_current_freq, there in MHz)."),
    MetricDef("npu_watchdog_chip_info_aicore_rated_freq_hertz", "gauge", _CHIP, "AI Core rated clock."),
    MetricDef("npu_watchdog_chip_health_codes", "gauge", _CHIP,
              "Health codes the chip reports now (npu-smi info -t health)."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    if not rt.config.probes.subhealth.enabled:
        return
    sample = rt.state.latest(SUBHEALTH)
    obs: Optional[SubhealthObservation] = sample.value if sample is not None else None
    if obs is None:
        return
    for c in obs.chips:
        labels = {"npu": str(c.npu), "chip": str(c.chip)}
        if c.health is not None:
            yield MetricSample("npu_watchdog_chip_health_codes", labels, len(c.codes))
        if c.ecc is not None:
            yield MetricSample("npu_watchdog_chip_info_hbm_ecc_single_bit_error_cnt", labels, c.ecc.single_bit)
            yield MetricSample("npu_watchdog_chip_info_hbm_ecc_double_bit_error_cnt", labels, c.ecc.double_bit)
            yield MetricSample("npu_watchdog_chip_ecc_isolated_pages", {**labels, "kind": "single_bit"},
                               c.ecc.single_bit_isolated_pages)
            yield MetricSample("npu_watchdog_chip_ecc_isolated_pages", {**labels, "kind": "double_bit"},
                               c.ecc.double_bit_isolated_pages)
        if c.common is not None and c.common.aicore_cur_freq_mhz is not None:
            yield MetricSample("npu_watchdog_chip_info_aicore_current_freq_hertz", labels,
                               c.common.aicore_cur_freq_mhz * 1e6)
        if c.common is not None and c.common.aicore_freq_mhz is not None:
            yield MetricSample("npu_watchdog_chip_info_aicore_rated_freq_hertz", labels, c.common.aicore_freq_mhz * 1e6)

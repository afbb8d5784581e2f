"""Metrics of the links probe: each NPU port's link state, flaps, reachability, optical power
and error counters (npu-exporter's names where it has one, with the npu_watchdog_ prefix, in base
units), read from the probe's latest round (a scrape never runs hccn_tool)."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from watchdog.host import clock
from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.parse import hccn
from watchdog.probes.links import DETAILS, LINKS, LinkObservation, PortReading, port_labels

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 62


_PORT = ("npu", "chip", "port")
METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_links_hccn_tool_present", "gauge", (),
              "1 if hccn_tool was found and the NPU ports are read, 0 if the node has none (nothing watched)."),
    MetricDef("npu_watchdog_chip_info_link_status", "gauge", _PORT,
              "Link state of the NPU's network port: 1 up, 0 down, -1 not read (npu-exporter's npu_chip_info_link_status)."),
    MetricDef("npu_watchdog_chip_link_up_num", "gauge", _PORT,
              "Link-up events the driver counted since it started (hccn_tool -link_stat; npu-exporter's npu_chip_link_up_num)."),
    MetricDef("npu_watchdog_link_flaps_recent", "gauge", _PORT,
              "Link-down events within probes.links.flap_window."),
    MetricDef("npu_watchdog_chip_info_network_status", "gauge", _PORT,
              "1 if the port reaches its detection address (net_health Success or Init), 0 if not, -1 not read "
              "(npu-exporter's npu_chip_info_network_status)."),
    MetricDef("npu_watchdog_chip_optical_rx_power_watts", "gauge", _PORT + ("lane",),
              "Optical power received per lane (npu-exporter's npu_chip_optical_rx_power_<lane>, there in mW)."),
    MetricDef("npu_watchdog_chip_optical_tx_power_watts", "gauge", _PORT + ("lane",),
              "Optical power transmitted per lane (npu-exporter's npu_chip_optical_tx_power_<lane>, there in mW)."),
    MetricDef("npu_watchdog_link_error_packets_total", "counter", _PORT + ("counter",),
              "Error, retransmission and out-of-order counters of the port (hccn_tool -stat, by the tool's counter name)."),
    MetricDef("npu_watchdog_link_pfc_frames_total", "counter", _PORT + ("direction",),
              "PFC pause frames sent (tx) and received (rx) by the port (hccn_tool -stat)."),
    MetricDef("npu_watchdog_link_query_failures_total", "counter", ("kind",),
              "hccn_tool queries that failed (timeout, exit code, unreadable output), by query kind."),
]


def _chip_map(rt: Any) -> Dict[int, Tuple[int, int]]:
    sample = rt.state.latest("npu")
    value = sample.value if sample is not None else None
    return dict(value.chip_map) if value is not None and not value.absent else {}


def samples(rt: Any) -> Iterator[MetricSample]:
    if not rt.config.probes.links.enabled:
        return
    sample = rt.state.latest(LINKS)
    obs: Optional[LinkObservation] = sample.value if sample is not None else None
    if obs is None:
        return
    yield MetricSample("npu_watchdog_links_hccn_tool_present", {}, 0 if obs.absent else 1)
    if obs.absent:
        return  # nothing is watched: that one series says so, and nothing else
    chip_map = _chip_map(rt)
    window = float(rt.config.probes.links.flap_window)
    now = clock.now()
    failures: Dict[str, int] = {}
    for p in obs.ports:
        labels = port_labels(p, chip_map)
        yield from _port_samples(p, labels, now - window)
        for kind, n in p.failures:
            failures[kind] = failures.get(kind, 0) + n
    for kind in ("link",) + DETAILS:
        yield MetricSample("npu_watchdog_link_query_failures_total", {"kind": kind}, failures.get(kind, 0))


def _port_samples(p: PortReading, labels: Dict[str, str], since: float) -> Iterator[MetricSample]:
    yield MetricSample("npu_watchdog_chip_info_link_status", labels, -1 if p.link_up is None else int(p.link_up))
    if p.up_count is not None:
        yield MetricSample("npu_watchdog_chip_link_up_num", labels, p.up_count)
    yield MetricSample("npu_watchdog_link_flaps_recent", labels, sum(1 for t in p.downs if t >= since))
    net = -1 if p.net_health is None else int(p.net_health in hccn.NET_HEALTH_OK)
    yield MetricSample("npu_watchdog_chip_info_network_status", labels, net)
    if p.optical is not None:
        for lane, mw in p.optical.rx_mw:
            yield MetricSample("npu_watchdog_chip_optical_rx_power_watts", {**labels, "lane": str(lane)}, mw / 1000)
        for lane, mw in p.optical.tx_mw:
            yield MetricSample("npu_watchdog_chip_optical_tx_power_watts", {**labels, "lane": str(lane)}, mw / 1000)
    for name, value in p.counters:
        if name in hccn.PFC_COUNTERS:
            yield MetricSample("npu_watchdog_link_pfc_frames_total",
                               {**labels, "direction": "tx" if "_tx_" in name else "rx"}, value)
        else:
            yield MetricSample("npu_watchdog_link_error_packets_total", {**labels, "counter": name}, value)

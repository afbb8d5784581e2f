"""The link and sub-health detectors on synthetic state: confirmation, thresholds, the job that
holds the chip (or none), and the action each finding names."""

from __future__ import annotations

from dataclasses import replace

from tests.synth import BASE, T0, Synth, chip, npu_obs, rules
from watchdog.config.schema import Config
from watchdog.detectors import links as links_det
from watchdog.detectors import subhealth as sub_det
from watchdog.npusmi.subhealth import CommonReading, EccCounts
from watchdog.observations import ProcessInfo, ProcessObservation
from watchdog.parse.hccn import LldpNeighbour, Optical
from watchdog.probes.links import LinkObservation, PortReading
from watchdog.probes.subhealth import ChipSubhealth, SubhealthObservation

GOOD_OPTICS = Optical(present=True, temp_c=45.0, tx_mw=((0, 1.4),) * 1, rx_mw=((0, 1.0), (1, 1.0)),
                      rx_low_mw=0.1445, tx_low_mw=0.2818, snr_db=22.0, rx_los=0, rx_lol=0)


def node() -> Synth:
    """The zero-config path: discovery on, no job configured (a chip no job holds names none)."""
    s = Synth(probes=("npu", "links", "subhealth"))
    s.config = Config.model_validate({"node": {"name": BASE["host"]}, "discovery": {"enabled": True},
                                     "probes": {"links": {"enabled": True}, "subhealth": {"enabled": True}}})
    s.put("npu", npu_obs([chip(n) for n in range(8)], held=[]), T0)
    return s


def discovered_job(s: Synth, npus) -> None:
    """A discovered job `llama` whose ranks npu-smi lists on `npus` (pids 1000+n)."""
    s.store.register("process", 10.0)
    s.store.update_status("process", up=True, runs_total=1)
    ranks = tuple(ProcessInfo(pid=1000 + n, rank=i, state="sleeping", create_time=T0 - 60, cpu_seconds=1.0,
                              cpu_delta=0.1, rss_bytes=1 << 30, threads=4, job="llama", npu=n)
                  for i, n in enumerate(npus))
    s.put("process", ProcessObservation(processes=ranks, expected=len(ranks), discovered=True), T0)
    s.put("npu", npu_obs([chip(n) for n in range(8)], held=list(npus)), T0)


def links(s: Synth, *ports: PortReading, at: float = T0 + 10):
    s.put("links", LinkObservation(ports=tuple(ports), tool="/usr/local/Ascend/driver/tools/hccn_tool"), at)
    return links_det.detect(s.view(at), s.config)


def test_one_down_read_is_not_enough_the_second_pages_with_chip_port_and_job():
    s = node()
    discovered_job(s, [2, 3])
    assert links(s, PortReading(device=3, link_up=False, down_reads=1, down_since=T0 + 5)) == []
    lldp = LldpNeighbour(port="400GE1/1/20:2", system="leaf-07")
    (f,) = links(s, PortReading(device=3, link_up=False, down_reads=2, down_since=T0 + 5, lldp=lldp), at=T0 + 15)
    assert f.rule == "link_down" and f.severity == "critical" and f.since == T0 + 5
    assert f.labels == {"host": BASE["host"], "npu": "3", "chip": "0", "port": "eth3", "training_job": "llama"}
    assert "job llama holds the chip" in f.summary and f.details["action"] == "isolate_now"
    assert (f.details["switch"], f.details["switch_port"]) == ("leaf-07", "400GE1/1/20:2")


def test_a_port_no_job_holds_is_a_node_finding_without_job_label():
    s = node()
    discovered_job(s, [0])
    (f,) = links(s, PortReading(device=5, link_up=False, down_reads=3, down_since=T0))
    assert "training_job" not in f.labels and f.labels["npu"] == "5"


def test_the_chip_mapping_names_the_npu_of_a_device_id():
    s = node()
    s.put("npu", replace(npu_obs([chip(n) for n in range(8)], held=[]), chip_map={6: (3, 1)}), T0)
    (f,) = links(s, PortReading(device=6, link_up=False, down_reads=2, down_since=T0))
    assert (f.labels["npu"], f.labels["chip"], f.labels["port"]) == ("3", "1", "eth6")


def test_three_flaps_in_ten_minutes_warn_two_or_spread_out_do_not():
    s = node()
    now = T0 + 1000
    three = (now - 500, now - 300, now - 100)
    (f,) = links(s, PortReading(device=1, link_up=True, downs=three), at=now)
    assert f.rule == "link_flapping" and f.severity == "warning" and f.details["flaps"] == 3
    assert links(s, PortReading(device=1, link_up=True, downs=three[1:]), at=now + 1) == []
    spread = (now - 1500, now - 900, now - 100)
    assert links(s, PortReading(device=1, link_up=True, downs=spread), at=now + 2) == []


def test_weak_optics_warn_while_the_link_is_up_only():
    s = node()
    weak = replace(GOOD_OPTICS, rx_mw=((0, 1.0), (1, 0.08)))  # -11 dBm, below -10
    (f,) = links(s, PortReading(device=4, link_up=True, optical=weak))
    assert f.rule == "optics_degraded" and "lane 1 receives -11.0 dBm" in f.summary
    assert links(s, PortReading(device=4, link_up=True, optical=GOOD_OPTICS), at=T0 + 11) == []
    down = links(s, PortReading(device=4, link_up=False, down_reads=2, down_since=T0, optical=weak), at=T0 + 12)
    assert [x.rule for x in down] == ["link_down"]


def test_absent_tool_or_blind_probe_finds_nothing():
    s = node()
    s.put("links", LinkObservation(absent=True), T0 + 10)
    assert links_det.detect(s.view(T0 + 10), s.config) == []
    s.put("links", LinkObservation(ports=(PortReading(device=0, link_up=False, down_reads=5, down_since=T0),)), T0 + 20)
    s.store.update_status("links", up=False, runs_total=3, last_error="every hccn_tool query failed")
    assert links_det.detect(s.view(T0 + 20), s.config) == []


def sub(s: Synth, *chips: ChipSubhealth, at: float = T0 + 10):
    s.put("subhealth", SubhealthObservation(chips=tuple(chips)), at)
    return sub_det.detect(s.view(at), s.config)


def test_single_bit_ecc_rising_warns_a_few_do_not():
    s = node()
    base = (T0 - 1800, EccCounts(100, 0))
    (f,) = sub(s, ChipSubhealth(npu=2, chip=0, ecc=EccCounts(112, 0), ecc_base=base))
    assert f.rule == "npu_ecc_single_bit_rising" and f.severity == "warning"
    assert f.details["new"] == 12 and f.details["action"] == "drain_after_job" and "training_job" not in f.labels
    assert sub(s, ChipSubhealth(npu=2, chip=0, ecc=EccCounts(105, 0), ecc_base=base), at=T0 + 11) == []


def test_double_bit_ecc_is_critical_isolate_now():
    s = node()
    discovered_job(s, [2])
    (f,) = sub(s, ChipSubhealth(npu=2, chip=0, ecc=EccCounts(0, 1), ecc_base=(T0 - 60, EccCounts(0, 0))))
    assert f.rule == "npu_ecc_double_bit" and f.severity == "critical" and f.details["action"] == "isolate_now"
    assert f.labels["training_job"] == "llama"


def test_a_code_that_keeps_coming_back_escalates():
    s = node()
    now = T0 + 7200
    twice = (("8C084E00", (now - 3000, now - 100)),)
    assert sub(s, ChipSubhealth(npu=1, chip=0, health="Alarm", codes=("8C084E00",), appearances=twice), at=now) == []
    thrice = (("8C084E00", (now - 5000, now - 3000, now - 100)),)
    (f,) = sub(s, ChipSubhealth(npu=1, chip=0, health="Alarm", codes=("8C084E00",), appearances=thrice), at=now + 1)
    assert f.rule == "npu_fault_recurring" and f.severity == "critical" and f.labels["code"] == "8C084E00"
    assert f.details["level"] == "FreeRestartNPU" and "ADDA heartbeat lost" in f.summary


def test_a_busy_chip_held_below_its_clock_is_throttled_an_idle_one_is_not():
    s = node()
    busy = CommonReading(1800, 1000, 80.0, 92.0, 310.0)
    (f,) = sub(s, ChipSubhealth(npu=0, chip=0, common=busy, throttled_since=T0 - 120, throttled_last=T0))
    assert f.rule == "npu_aicore_throttled" and f.details["action"] == "watch"
    assert sub(s, ChipSubhealth(npu=0, chip=0, common=busy, throttled_since=T0 - 10, throttled_last=T0), at=T0 + 11) == []


def test_one_slow_clock_read_followed_by_a_gap_is_not_a_hold():
    """Each chip's clock is read every third sub-health round (3 min as shipped): a single slow
    read, however long ago, is not `throttle_for` of being held down; the next read decides."""
    s = node()
    busy = CommonReading(1800, 1000, 80.0, 92.0, 310.0)
    assert sub(s, ChipSubhealth(npu=0, chip=0, common=busy, throttled_since=T0 - 170, throttled_last=T0 - 170)) == []
    (f,) = sub(s, ChipSubhealth(npu=0, chip=0, common=busy, throttled_since=T0 - 170, throttled_last=T0 - 5))
    assert f.rule == "npu_aicore_throttled" and "busy for 2m" in f.summary, f.summary


def test_npu_unhealthy_names_each_code_meaning_and_the_action():
    from watchdog.detectors import npu as npu_det

    s = node()
    chips = [chip(n, util=0) for n in range(8)]
    chips[4] = chip(4, util=0, health="Alarm")
    s.put("npu", npu_obs(chips, held=[], codes={(4, 0): ["8C084E00"]}), T0 + 10)
    (f,) = rules(npu_det.detect(s.view(T0 + 10), s.config), "npu_unhealthy")
    assert "8C084E00: ADDA heartbeat lost" in f.summary and f.details["action"] == "drain_after_job"
    assert f.details["code_levels"] == {"8C084E00": "FreeRestartNPU"}

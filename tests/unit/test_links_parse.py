"""The hccn_tool and npu-smi sub-health parsers on real captures (tests/fixtures/*/SOURCES.md):
one or more per tool version found; output of another layout is refused with a clear error,
never read as a healthy link."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Dict

import pytest

from watchdog.config.schema import Config
from watchdog.detectors.links import optics_problems
from watchdog.npusmi.parse import NpuSmiParseError
from watchdog.npusmi.subhealth import ISOLATE, DRAIN, WATCH, advise, parse_common, parse_ecc
from watchdog.parse import hccn
from watchdog.parse.hccn import HccnParseError
from watchdog.probes.links import PortReading

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def hccn_text(name: str) -> str:
    return (FIX / "hccn_tool" / name).read_text(encoding="utf-8")


def npusmi_text(name: str) -> str:
    return (FIX / "npu-smi" / name).read_text(encoding="utf-8")


def per_device(text: str) -> Dict[int, str]:
    """A FaultDiag fixture's sections: the command line (`... hccn_tool -i N ...`) then its output."""
    out: Dict[int, str] = {}
    dev = None
    for line in text.splitlines():
        if "hccn_tool -i " in line:
            dev = int(line.split("-i ", 1)[1].split()[0])
            out[dev] = ""
        elif dev is not None:
            out[dev] += line + "\n"
    return out


def local(text: str) -> float:
    return time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y"))


def test_link_state_up_and_down():
    assert hccn.parse_link(hccn_text("link_UP_mindcluster-doc.txt")) is True
    assert hccn.parse_link(hccn_text("link_DOWN_ascend950-doc.txt")) is False
    with pytest.raises(HccnParseError, match="link status"):
        hccn.parse_link("device 3 is not exist\n")


def test_link_stat_with_down_count_newest_first():
    st = hccn.parse_link_stat(hccn_text("link_stat_with-down-count_hccl-doc.txt"))
    assert (st.up_count, st.down_count) == (2, 1)
    assert [c.up for c in st.changes] == [True, False, True]
    assert st.changes[1].time == local("Sun Oct 5 10:13:50 2025")  # `Oct  5`: the day is space-padded
    assert st.tool_time == local("Tue Oct 28 21:46:46 2025")
    assert st.newest_down is False


def test_link_stat_of_an_older_driver_has_no_down_count():
    st = hccn.parse_link_stat(hccn_text("link_stat_device-prefix_1flap_mindcluster-doc.txt"))
    assert (st.up_count, st.down_count) == (2, None)
    assert [c.up for c in st.changes] == [True, False, True]


def test_link_stat_of_eight_devices_two_currently_down():
    devs = per_device(hccn_text("link_stat_8dev_2-currently-down_faultdiag-fixture.txt"))
    assert sorted(devs) == list(range(8))
    down = {d for d, text in devs.items() if hccn.parse_link_stat(text).newest_down}
    assert down == {0, 3}


def test_link_stat_table_of_the_950_is_refused():
    with pytest.raises(HccnParseError, match="link up count"):
        hccn.parse_link_stat(hccn_text("link_stat_table_ascend950-doc.txt"))


def test_net_health_values():
    assert hccn.parse_net_health(hccn_text("net_health_Init_mindcluster-doc.txt")) == "Init"
    assert hccn.parse_net_health(hccn_text("net_health_Fault_after-link-down_mindcluster-doc.txt")) == "Fault"
    assert hccn.parse_net_health(hccn_text("net_health_Success_after-recovery_mindcluster-doc.txt")) == "Success"
    assert hccn.parse_net_health("net health status: Socket failed\n") == "Socket fail"
    with pytest.raises(HccnParseError, match="unknown net health"):
        hccn.parse_net_health("net health status: Splendid\n")


def test_optical_lanes_thresholds_and_flags():
    o = hccn.parse_optical(hccn_text("optical_4lane_Rx1-0.0054mW_SNR_faultdiag-fixture.txt"))
    assert dict(o.rx_mw) == {0: 1.0189, 1: 0.0054, 2: 0.9907, 3: 1.0213}
    assert dict(o.tx_mw)[0] == 4.4035 and o.rx_low_mw == 0.1445 and o.tx_low_mw == 0.2818
    assert o.snr_db == 22.1875  # media SNR, host SNR `not supported`
    assert (o.rx_los, o.rx_lol) == (0xFF, 0xFF) and o.temp_c == 47.0
    assert o.present is False  # the fixture's authors edited it to `not present`
    assert round(hccn.mw_to_dbm(0.0054), 1) == -22.7


def test_optics_problems_name_the_weak_lane():
    cfg = Config().probes.links
    o = hccn.parse_optical(hccn_text("optical_4lane_Rx1-0.0054mW_SNR_faultdiag-fixture.txt"))
    port = PortReading(device=0, link_up=True, optical=replace(o, present=True))
    problems = optics_problems(cfg, port)
    assert problems == ["lane 1 receives -22.7 dBm (0.0054 mW)"]
    assert optics_problems(cfg, replace(port, optical=o)) == []  # no module: nothing to judge


def test_stat_counters_both_layouts():
    devs = per_device(hccn_text("stat_8dev_roce-err-nonzero_faultdiag-fixture.txt"))
    assert hccn.parse_stat(devs[5]) == {"roce_rx_err_pkt_num": 11, "roce_tx_err_pkt_num": 12}
    assert hccn.parse_stat(devs[0]) == {"roce_rx_err_pkt_num": 0, "roce_tx_err_pkt_num": 0}
    ub = hccn.parse_stat(hccn_text("stat_ub-port_ascend950-doc.txt"))  # `name: value` with a space
    assert ub["crc_error_sum"] == 0 and ub["retry_req_sum"] == 0 and len(ub) > 30
    with pytest.raises(HccnParseError):
        hccn.parse_stat("packet statistics:\n")


def test_fec_and_lldp():
    assert hccn.parse_fec(hccn_text("fec_noFEC_faultdiag-fixture.txt")) == "no"
    with pytest.raises(HccnParseError, match="fec mode"):
        hccn.parse_fec(hccn_text("fec_table_ascend950-doc.txt"))
    n = hccn.parse_lldp(hccn_text("lldp_full_910B1_arthurchiao.txt"))
    assert n.port == "400GE1/1/20:2" and n.system.startswith("Versatile Routing Platform")


def test_hostile_text_is_refused_in_linear_time():
    junk = "link status: " + "UP" * 200_000 + "\n" + "[devid 1]" + " " * 200_000 + "x\n"
    with pytest.raises(HccnParseError):
        hccn.parse_link(junk)
    with pytest.raises(HccnParseError):
        hccn.parse_link_stat(junk)
    with pytest.raises(HccnParseError):
        hccn.parse_optical("a" * 300_000)


def test_ecc_910_and_950():
    assert parse_ecc(npusmi_text("info_t_ecc_910_23.0.5.txt")).single_bit == 0
    e = parse_ecc(npusmi_text("info_t_ecc_950_NextIsolated_doc.txt"))
    assert (e.single_bit, e.double_bit, e.single_bit_isolated_pages) == (0, 0, 0)
    e = parse_ecc("HBM Single Bit Error Count : 7\nHBM Double Bit Error Count : 1\n"
                  "DDR Single Bit Error Count : 2\nDDR Double Bit Error Count : 0\n")
    assert (e.single_bit, e.double_bit) == (9, 1)
    with pytest.raises(NpuSmiParseError):
        parse_ecc(npusmi_text("info_t_common_910B3_25.5.1.txt"))


def test_common_frequency_temperature_power():
    r = parse_common(npusmi_text("info_t_common_910B3_25.5.1.txt"))
    assert (r.aicore_freq_mhz, r.aicore_cur_freq_mhz, r.aicore_util_pct, r.temp_c, r.power_w) == (1800, 800, 0.0, 33.0, 99.7)
    r = parse_common(npusmi_text("info_t_common_910B1_23.0.rc2_curFreq800.txt"))
    assert (r.aicore_cur_freq_mhz, r.temp_c) == (800, 46.0)  # the chip's temperature, not the mcu's
    r = parse_common(npusmi_text("info_t_common_950_curFreq100_doc.txt"))
    assert (r.aicore_freq_mhz, r.aicore_cur_freq_mhz, r.power_w) == (1650, 100, 298.6)


def test_health_codes_get_the_vendor_level_and_action():
    assert advise("8C084E00").level == "FreeRestartNPU" and advise("8C084E00").action == DRAIN
    assert advise("0x80E3A201").action == ISOLATE  # SeparateNPU
    assert advise("81078605").level == "SubHealthFault" and advise("81078605").action == WATCH
    unknown = advise("DEADBEEF", "Critical")
    assert unknown.level == "unknown" and unknown.action == ISOLATE
    # The real multi-code capture: every code is in the table.
    assert [advise(c).level for c in ("A4025021", "8C03A000", "8C084E00")] == \
        ["NotHandleFault", "RestartNPU", "FreeRestartNPU"]

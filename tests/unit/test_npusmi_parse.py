"""The npu-smi parsers on every real capture (tests/fixtures/npu-smi, copied from the public samples)."""

from __future__ import annotations


import pytest

from tests.helpers import TESTS
from watchdog.npusmi.parse import (
    NpuSmiParseError,
    NpuSmiUnavailable,
    detect_failure,
    parse_health,
    parse_info,
    parse_kv,
)
from watchdog.observations import NpuChip, NpuProcess

FIX = TESTS / "fixtures" / "npu-smi"


def read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def chip(obs, npu, c=0) -> NpuChip:
    found = [x for x in obs.chips if x.npu == npu and x.chip == c]
    assert len(found) == 1, (npu, c, obs.chips)
    return found[0]


def test_910b3_8card_empty_process_name_and_glued_pairs():
    obs = parse_info(read("info_910B3_8card_25.2.0_procs.txt"))
    assert obs.version == "25.2.0"
    assert [(c.npu, c.chip) for c in obs.chips] == [(i, 0) for i in range(8)]
    c0 = chip(obs, 0)
    assert c0 == NpuChip(npu=0, chip=0, device_id=None, name="910B3", health="OK", power_w=97.9, temp_c=34.0,
                         aicore_util_pct=0.0, memory_used_mb=0, memory_total_mb=0, hbm_used_mb=3408,
                         hbm_total_mb=65536, bus_id="0000:C1:00.0")
    c2 = chip(obs, 2)  # "41052/ 65536": no space before the slash
    assert (c2.hbm_used_mb, c2.hbm_total_mb, c2.bus_id, c2.power_w) == (41052, 65536, "0000:81:00.0", 92.3)
    assert chip(obs, 7).temp_c == 37.0
    assert obs.processes == (NpuProcess(npu=2, chip=0, pid=1333928, name="", memory_mb=37709),)


def test_910a_8card_ddr_and_hbm_no_process_table():
    obs = parse_info(read("info_910A_8card_22.0.3.1_atlas800_9010.txt"))
    assert obs.version == "22.0.3.1"
    assert len(obs.chips) == 8 and obs.processes == ()
    c3 = chip(obs, 3)
    assert (c3.power_w, c3.temp_c, c3.memory_used_mb, c3.memory_total_mb, c3.hbm_used_mb, c3.hbm_total_mb) == \
        (191.7, 42.0, 1866, 15077, 0, 32768)
    assert (c3.name, c3.device_id) == ("910A", None)


def test_310b4_devices_only_parses_with_processes_unknown():
    """npu-smi 23.0.0 on a 310B4 board prints no process table: the device parses, and its
    processes are unknown (not "none"); a 910B table of the same version without one is refused."""
    text = read("info_310B4_23.0.0_no_process_table.txt")
    obs = parse_info(text)
    assert obs.version == "23.0.0" and obs.processes == () and obs.processes_known is False
    assert obs.chips == (NpuChip(npu=0, chip=0, device_id=0, name="310B4", health="Alarm", power_w=0.0,
                                 temp_c=65.0, aicore_util_pct=0.0, memory_used_mb=3628, memory_total_mb=15609,
                                 hbm_used_mb=None, hbm_total_mb=None, bus_id=None),)
    assert parse_info(read("info_910B3_8card_25.2.0_procs.txt")).processes_known is True
    # The same layout with a 910B chip name: a version that prints a process table must have one.
    with pytest.raises(NpuSmiParseError, match="the table is cut"):
        parse_info(text.replace("310B4", "910B4"))
    # A device block cut after its first row is still refused.
    cut = "\n".join(text.splitlines()[:7]) + "\n"
    with pytest.raises(NpuSmiParseError, match="second row|cut"):
        parse_info(cut)


def test_old_layout_without_process_table_says_processes_unknown():
    assert parse_info(read("info_910A_8card_22.0.3.1_atlas800_9010.txt")).processes_known is False


def test_910_warning_health_and_many_truncated_processes():
    obs = parse_info(read("info_910_8card_24.1.RC2_Warning_procs.txt"))
    assert obs.version == "24.1.RC2"
    assert [c.health for c in obs.chips] == ["OK", "OK", "OK", "Warning", "OK", "OK", "OK", "Warning"]
    assert (chip(obs, 7).memory_used_mb, chip(obs, 7).memory_total_mb) == (4521, 15039)
    assert len(obs.processes) == 32
    assert obs.processes[0] == NpuProcess(npu=0, chip=0, pid=37656, name="hlt_host_devmm_", memory_mb=686)
    assert obs.processes[-1] == NpuProcess(npu=7, chip=0, pid=37663, name="hlt_host_devmm_", memory_mb=686)
    assert sorted({p.npu for p in obs.processes}) == list(range(8))


def test_a3_two_dies_phy_id_and_power_dash():
    obs = parse_info(read("info_910_A3_16die_24.1.rc3.5_idle.txt"))
    assert obs.version == "24.1.rc3.5"
    assert len(obs.chips) == 16
    assert [(c.npu, c.chip, c.device_id) for c in obs.chips[:4]] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    die0, die1 = chip(obs, 7, 0), chip(obs, 7, 1)
    assert (die0.power_w, die0.device_id, die0.hbm_used_mb, die0.bus_id) == (181.1, 14, 3427, "0000:81:00.0")
    assert (die1.power_w, die1.device_id, die1.hbm_used_mb, die1.temp_c) == (None, 15, 3187, 36.0)
    assert all(c.power_w is None for c in obs.chips if c.chip == 1)
    assert obs.processes == ()


def test_310p_duo_ids_not_dense_no_hbm_power_na():
    obs = parse_info(read("info_310P3_Duo_4card_25.3.rc1.txt"))
    assert obs.version == "25.3.rc1"
    assert [(c.npu, c.chip, c.device_id) for c in obs.chips] == [
        (0, 0, 0), (0, 1, 1), (32, 0, 2), (32, 1, 3), (32768, 0, 4), (32768, 1, 5), (32800, 0, 6), (32800, 1, 7)]
    c = chip(obs, 32768, 1)
    assert (c.name, c.power_w, c.temp_c, c.memory_used_mb, c.memory_total_mb) == ("310P3", None, 46.0, 1391, 43693)
    assert (c.hbm_used_mb, c.hbm_total_mb, c.bus_id, c.aicore_util_pct) == (None, None, "0000:81:00.0", 0.0)
    assert obs.processes == ()


def test_310_oldest_layout_one_npu_four_chips():
    obs = parse_info(read("info_310_4chip_20.2.0_atlas300.txt"))
    assert obs.version == "20.2.0"
    assert [(c.npu, c.chip, c.device_id) for c in obs.chips] == [(215, i, i) for i in range(4)]
    c = chip(obs, 215, 2)
    assert (c.power_w, c.temp_c, c.memory_used_mb, c.memory_total_mb, c.bus_id) == (12.8, 57.0, 2703, 8192, "0000:DD:00.0")
    assert c.hbm_used_mb is None


def test_910b1_busy_rows():
    obs = parse_info(read("info_910B1_23.0.rc3.3_busy_excerpt.txt"))
    assert [(c.aicore_util_pct, c.hbm_used_mb, c.power_w) for c in obs.chips] == [(55.0, 65099, 271.1), (66.0, 65098, 275.0)]
    assert obs.processes == (NpuProcess(0, 0, 576489, "python", 60703), NpuProcess(1, 0, 576491, "python", 60704))


def test_910b2c_trailing_spaces_after_bars():
    obs = parse_info(read("info_910B2C_23.0.2.1_proc.txt"))
    assert obs.version == "23.0.2.1"
    assert (chip(obs, 1).hbm_used_mb, chip(obs, 1).power_w) == (20687, 99.6)
    assert obs.processes == (NpuProcess(0, 0, 124528, "python3.8", 17400),)


def test_wide_layout_fragments_are_refused_with_the_gap_line():
    with pytest.raises(NpuSmiParseError) as ei:
        parse_info(read("info_910_A3_26.0.rc2_wide_layout_FRAGMENTS.txt"))
    assert ei.value.line_no == 12 and ei.value.line == "[... gap ...]"
    assert "line 12" in str(ei.value)


def test_wide_layout_with_fifth_process_column():
    # The two verbatim fragments, joined without the gap markers and the truncated last lines.
    lines = [l for l in read("info_910_A3_26.0.rc2_wide_layout_FRAGMENTS.txt").splitlines()
             if not l.startswith("[...")]
    # Drop the cut-off '| No running processes found in NPU 2' and account for NPU 7 (its line is in
    # the gap): the parser refuses a process table that leaves a listed NPU out (a cut table).
    idle7 = "| No running processes found in NPU 7" + " " * 79 + "|"
    text = "\n".join(lines[:-1] + [idle7, lines[-2]])
    obs = parse_info(text)
    assert obs.version == "26.0.rc2"
    assert [(c.npu, c.chip, c.device_id, c.power_w) for c in obs.chips] == [
        (0, 0, 0, 162.6), (0, 1, 1, None), (7, 1, 15, None)]
    assert chip(obs, 7, 1).hbm_used_mb == 31877
    assert obs.processes == (NpuProcess(0, 0, 632268, "python3.1", 197),)


@pytest.mark.parametrize("name", ["npu-smi_error_in_container_-8020.txt", "npu-smi_error_invalid_card_id.txt",
                                  "info_h_23.0.rc2.txt"])
def test_failure_texts_are_unavailable_not_zero_npus(name):
    with pytest.raises(NpuSmiUnavailable):
        parse_info(read(name))


def test_failure_text_detection():
    assert detect_failure(read("npu-smi_error_in_container_-8020.txt")) == \
        "dcmi model initialized failed, because the device is used. ret is -8020"
    assert detect_failure("DrvMngGetConsoleLogLevel failed. (ret=4)\ndcmi module initialize failed. ret is -8005\n") == \
        "dcmi module initialize failed. ret is -8005"
    assert detect_failure(read("npu-smi_error_invalid_card_id.txt")) == "Invalid card id."
    assert detect_failure(read("info_910B3_8card_25.2.0_procs.txt")) is None


@pytest.mark.parametrize("name", sorted(p.name for p in FIX.glob("info_[lmt]_*.txt") if "health" not in p.name))
def test_other_outputs_are_not_mistaken_for_a_table(name):
    with pytest.raises(NpuSmiParseError) as ei:
        parse_info(read(name))
    assert ei.value.line_no == 1


@pytest.mark.parametrize("text,line_no", [
    ("", None),
    ("hello world\n", 1),
    ("+----+\n| NPU  Name | Health | Power(W) Temp(C) |\n| 0  910B | OK | 1.0 2.0 |\n", 3),
])
def test_garbage_names_the_first_bad_line(text, line_no):
    with pytest.raises(NpuSmiParseError) as ei:
        parse_info(text)
    assert ei.value.line_no == line_no


def test_value_count_mismatch_is_an_error_not_a_guess():
    text = read("info_910B3_8card_25.2.0_procs.txt").replace("| 97.9        34  ", "| 97.9        34   7 ", 1)
    with pytest.raises(NpuSmiParseError) as ei:
        parse_info(text)
    assert ei.value.line_no == 7 and "expected 3 values" in str(ei.value)


def test_non_numeric_value_is_an_error():
    text = read("info_910B3_8card_25.2.0_procs.txt").replace("3408 / 65536", "3408 / lots", 1)
    with pytest.raises(NpuSmiParseError) as ei:
        parse_info(text)
    assert ei.value.line_no == 8 and "lots" in str(ei.value)


def test_header_without_devices_is_unavailable():
    lines = read("info_910B3_8card_25.2.0_procs.txt").splitlines()[:6]
    with pytest.raises(NpuSmiUnavailable):
        parse_info("\n".join(lines))


def test_health_alarm_multicode_with_continuation_lines():
    h = parse_health(read("info_t_health_Alarm_multicode_23.0.7.txt"))
    assert h.status == "Alarm"
    assert h.codes == ("A4025021", "8C03A000", "8C084E00")
    assert h.information[0] == "ascend_monitor adda heart beat lost error"
    assert h.information[2].startswith("node type=adda, sensor type=Heartbeat Sensor")
    assert len(h.information) == 3


def test_health_ok():
    h = parse_health(read("info_t_health_OK_23.0.5.txt"))
    assert (h.status, h.codes, h.information) == ("OK", (), ())


def test_health_errors():
    with pytest.raises(NpuSmiUnavailable):
        parse_health(read("npu-smi_error_invalid_card_id.txt"))
    with pytest.raises(NpuSmiParseError):
        parse_health(read("info_t_power_910B3_25.5.1.txt"))  # key/value, but no Health Status
    with pytest.raises(NpuSmiParseError):
        parse_health("Health Status : Alarm\nError Code : zz99\n")


def test_kv_keeps_repeated_keys_in_order():
    pairs = parse_kv(read("info_t_common_910B3_25.5.1.txt"))
    assert [v for k, v in pairs if k == "Temperature(C)"] == ["33", "31"]


def test_unknown_metric_column_is_not_misplaced():
    text = read("info_910B3_8card_25.2.0_procs.txt")
    text = text.replace("Hugepages-Usage(page)|", "Hugepages-Usage(page) NPU-Util(%)|", 1)
    text = "\n".join(l.replace("0    / 0             |", "0    / 0  42         |")
                     if "910B3" in l else l for l in text.splitlines())
    obs = parse_info(text)
    c0 = chip(obs, 0)
    assert c0 == chip(parse_info(read("info_910B3_8card_25.2.0_procs.txt")), 0)  # the 42 went nowhere
    hash(c0)  # chips stay hashable records


def test_processes_unknown_reach_metrics_and_doctor_as_unknown():
    """No process table: no `npu_watchdog_npu_processes` sample (not a made-up 0) and doctor
    says the processes are unknown instead of passing "no process holds a device"."""
    from watchdog.doctor.devices import check_devices
    from watchdog.doctor.model import PASS, SKIPPED
    from watchdog.metrics.npu import chip_samples

    unknown = parse_info(read("info_310B4_23.0.0_no_process_table.txt"))
    names = {s.name for s in chip_samples(unknown)}
    assert "npu_watchdog_npu_processes" not in names and "npu_watchdog_npu_health" in names
    known = parse_info(read("info_910B3_8card_25.2.0_procs.txt"))
    assert "npu_watchdog_npu_processes" in {s.name for s in chip_samples(known)}
    procs = [c for c in check_devices(unknown, None, 0.1) if c.name == "processes"]
    assert [c.status for c in procs] == [SKIPPED] and "unknown" in procs[0].reason
    idle = parse_info(read("info_910_A3_16die_24.1.rc3.5_idle.txt"))
    assert [c.status for c in check_devices(idle, None, 0.1) if c.name == "processes"] == [PASS]

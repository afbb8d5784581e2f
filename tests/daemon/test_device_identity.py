"""Device identity: `npu-smi info -m` on real captures, the device a real log line names, and the
real daemon labelling a plog device fault with the NPU ID npu-smi (and our metrics) use."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers import TESTS, wait_for
from watchdog.detectors.logs import _device_labels
from watchdog.logrules.device import device_of
from watchdog.npusmi import NpuSmiParseError, NpuSmiUnavailable, parse_chip_map

HERE = TESTS
FIX = HERE / "fixtures" / "npu-smi"
CORPUS = HERE / "samples" / "corpus"
FAKE = str(HERE / "fakes" / "npu-smi")


def corpus_line(name: str, needle: str) -> str:
    """A verbatim line of the sample corpus (without its annotation) containing `needle`."""
    for line in (CORPUS / name).read_text(encoding="utf-8").splitlines():
        if needle in line:
            return line.rsplit("  ##> ", 1)[0]
    raise AssertionError(f"{needle!r} not in {name}")


def test_chip_map_of_real_captures() -> None:
    m310 = parse_chip_map((FIX / "info_m_310_atlas300.txt").read_text())
    # An Atlas 300 card: one NPU ID (6) holding four chips with logic ids 0-3; the Mcu row is no device.
    assert {k: (e.npu, e.chip) for k, e in m310.items()} == {0: (6, 0), 1: (6, 1), 2: (6, 2), 3: (6, 3)}
    assert m310[2].name == "MiniD"
    b3 = parse_chip_map((FIX / "info_m_910B3_8card_25.5.1.txt").read_text())  # TAB-indented, Mcu rows
    assert sorted(b3) == list(range(8)) and b3[5].npu == 5 and b3[5].chip == 0 and b3[5].name == "Ascend 910B3"
    a = parse_chip_map((FIX / "info_m_910A_8card.txt").read_text())
    assert {k: e.npu for k, e in a.items()} == {i: i for i in range(8)}


def test_chip_map_errors_name_the_line() -> None:
    good = (FIX / "info_m_310_atlas300.txt").read_text()
    with pytest.raises(NpuSmiParseError, match="header"):
        parse_chip_map("6  0  0  MiniD\n")
    with pytest.raises(NpuSmiParseError, match="at line 3"):
        parse_chip_map(good.splitlines()[0] + "\n6 0 0 MiniD\n6 1\n")
    with pytest.raises(NpuSmiParseError, match="listed twice"):
        parse_chip_map(good + "7 0 0 MiniD\n")
    with pytest.raises(NpuSmiParseError, match="empty"):
        parse_chip_map("\n\n")
    with pytest.raises(NpuSmiUnavailable):
        parse_chip_map((FIX / "npu-smi_error_in_container_-8020.txt").read_text())


def test_device_named_by_real_lines() -> None:
    assert device_of(corpus_line("cann_plog.log", "Task run failed, device_id=3")) == 3
    assert device_of(corpus_line("device_and_kernel_logs.log", "Heartbeat lost! (device=1;")) == 1
    assert device_of(corpus_line("device_and_kernel_logs.log", "devid=1 tsid=0")) == 1
    assert device_of(corpus_line("device_and_kernel_logs.log", "[devid-0][tsid-0] before shift")) == 0
    assert device_of(corpus_line("device_and_kernel_logs.log", "fail info: device_id-2")) == 2
    assert device_of(corpus_line("mindspore.log", "Task fail infos task_id: 2")) == 0
    assert device_of(corpus_line("vllm_ascend.log", "Aicore kernel execute failed, device_id=0")) == 0
    assert device_of(corpus_line("cann_plog.log", "wait socket establish timeout, role[1] rank[10]")) is None


def test_device_labels_without_a_mapping_keep_the_logic_id() -> None:
    view = SimpleNamespace(latest=lambda name: None)
    assert _device_labels(3, view) == {"device_id": "3"}
    assert _device_labels(None, view) == {}
    npu = SimpleNamespace(value=SimpleNamespace(chip_map={3: (6, 3)}))
    assert _device_labels(3, SimpleNamespace(latest=lambda name: npu)) == {"device_id": "3", "npu": "6", "chip": "3"}
    assert _device_labels(9, SimpleNamespace(latest=lambda name: npu)) == {"device_id": "9"}


def test_daemon_names_the_npu_of_a_plog_device_fault(make_daemon, tmp_path: Path) -> None:
    """A real plog line (`Task run failed, device_id=3`) on a node whose `npu-smi info -m` is a real
    Atlas 300 capture (NPU 6, chips 0-3): the log finding names NPU 6 chip 3, like the metrics."""
    scen = tmp_path / "scenario.json"
    scen.write_text(json.dumps({"generate": {"npu_ids": [6], "chips_per_npu": 4, "name": "310"},
                                "mapping": str(FIX / "info_m_310_atlas300.txt")}))
    plogs = tmp_path / "plog"
    plogs.mkdir()
    d = make_daemon({
        "probes": {
            "npu": {"enabled": True, "interval": "1s", "npu_smi": FAKE, "command_timeout": "2s"},
            "logs": {"enabled": True, "interval": "1s", "hold": "1h",
                     "sources": [{"name": "plog", "kind": "plog", "paths": [str(plogs / "*.log")]}]},
        },
    }, env={"FAKE_NPU_SMI_SCENARIO": str(scen)})
    m = wait_for(lambda: (lambda m: m if 'npu_watchdog_npu_health{chip="3",npu="6"}' in m else None)(d.metrics()),
                 timeout=30, what="npu metrics of NPU 6 chip 3")
    line = corpus_line("cann_plog.log", "Task run failed, device_id=3")
    with open(plogs / "plog-1365_20250806230935838.log", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    f = wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "log_device"], timeout=30,
                 what="log_device finding")[0]
    assert f["labels"]["log_rule"] == "device_task_run_failed"
    assert (f["labels"]["device_id"], f["labels"]["npu"], f["labels"]["chip"]) == ("3", "6", "3")
    assert "NPU 6 chip 3" in f["summary"]
    assert 'npu_watchdog_npu_health{chip="3",npu="6"}' in m  # the same NPU/chip the metrics name


def test_probe_keeps_the_last_mapping_when_info_m_fails(tmp_path: Path, monkeypatch) -> None:
    """The npu probe against the fake npu-smi: a failing `info -m` is recorded (the table round
    still succeeds), a later good answer fills the mapping, a later failure keeps it."""
    from watchdog.config import load_config_text
    from watchdog.npusmi.run import STATS
    from watchdog.probes import npu as npu_probe

    scen = tmp_path / "scenario.json"

    def scenario(mapping_behavior: str) -> None:
        scen.write_text(json.dumps({"generate": {"npu_ids": [6], "chips_per_npu": 4, "name": "310"},
                                    "mapping": str(FIX / "info_m_310_atlas300.txt"),
                                    "mapping_behavior": mapping_behavior}))

    monkeypatch.setenv("FAKE_NPU_SMI_SCENARIO", str(scen))
    monkeypatch.setattr(npu_probe, "CHIP_MAP_RETRY", 0.0)
    monkeypatch.setattr(npu_probe, "CHIP_MAP_REFRESH", 0.0)
    cfg = load_config_text(f"node: {{name: n}}\njob: {{name: j}}\nprobes:\n  npu: {{enabled: true, npu_smi: '{FAKE}'}}\n")
    probe = npu_probe.NpuProbe(cfg.probes.npu)
    scenario("fail")
    before = STATS.snapshot().failures["unavailable"]
    obs = probe.collect().value
    assert len(obs.chips) == 4 and obs.chip_map == {}
    assert probe._map_error and probe._map_error.startswith("npu-smi unavailable:")
    assert STATS.snapshot().failures["unavailable"] == before + 1
    scenario("ok")
    obs = probe.collect().value
    assert obs.chip_map == {0: (6, 0), 1: (6, 1), 2: (6, 2), 3: (6, 3)} and probe._map_error is None
    scenario("garbage")
    obs = probe.collect().value
    assert obs.chip_map[3] == (6, 3) and probe._map_error.startswith("npu-smi output unreadable:")


def test_chip_map_hostile_numbers_are_parse_errors() -> None:
    head = (FIX / "info_m_310_atlas300.txt").read_text().splitlines()[0]
    with pytest.raises(NpuSmiParseError, match="at line 2"):
        parse_chip_map(head + "\n" + "9" * 5000 + " 0 0 MiniD\n")
    with pytest.raises(NpuSmiParseError, match="at line 2"):
        parse_chip_map(head + "\n6 0 nan MiniD\n")

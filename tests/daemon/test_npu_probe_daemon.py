"""The real daemon with its npu probe pointed at the fake npu-smi: metrics and npu-smi findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, TESTS, wait_for
from watchdog.config import load_config_text
from watchdog.detectors.npu_smi import detect
from watchdog.core.state import FailureReason, ProbeStatus, StateView

HERE = TESTS
FAKE = str(HERE / "fakes" / "npu-smi")
FIX = HERE / "fixtures" / "npu-smi"


def write_scenario(path: Path, spec: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(spec))
    os.replace(tmp, path)


def npu_config(**extra) -> dict:
    npu = {"enabled": True, "interval": "1s", "npu_smi": FAKE, "command_timeout": "2s",
           "health_interval": "0s", "failing_after": "1s"}
    npu.update(extra)
    return {"probes": {"npu": npu}}


def rules(d) -> set:
    return {f["rule"] for f in d.status()["findings"]}


def test_daemon_serves_npu_metrics_and_keeps_a_vanished_chip(make_daemon, tmp_path):
    scen = tmp_path / "scenario.json"
    base = {"generate": {"npus": 8},
            "devices": {"3": {"aicore": 87, "hbm_used_mb": 41000, "power_w": 250.5, "temp_c": 61}},
            "processes": [{"npu": 3, "chip": 0, "pid": 4242, "name": "python", "memory_mb": 40000}]}
    write_scenario(scen, base)
    d = make_daemon(npu_config(), env={"FAKE_NPU_SMI_SCENARIO": str(scen)})
    m = wait_for(lambda: (lambda m: m if 'npu_watchdog_npus_seen' in m else None)(d.metrics()),
                 timeout=30, what="npu metrics")
    c3 = '{chip="0",npu="3"}'
    assert m["npu_watchdog_npus_seen"] == 8 and m["npu_watchdog_npus_healthy"] == 8
    assert m["npu_watchdog_npu_aicore_utilization_ratio" + c3] == pytest.approx(0.87)
    assert m["npu_watchdog_npu_hbm_used_bytes" + c3] == 41000 * 1024 * 1024
    assert m["npu_watchdog_npu_hbm_total_bytes" + c3] == 65536 * 1024 * 1024
    assert m["npu_watchdog_npu_power_watts" + c3] == 250.5
    assert m["npu_watchdog_npu_temperature_celsius" + c3] == 61
    assert m["npu_watchdog_npu_processes" + c3] == 1
    assert m["npu_watchdog_npu_health" + c3] == 0
    assert m['npu_watchdog_npu_smi_failures_total{reason="timeout"}'] == 0
    assert 'npu_watchdog_npu_info{bus_id="0000:BE:00.0",chip="0",device_id="",name="910B3",npu="3",version="23.0.6"}' in m

    # Card 5 falls off the bus and card 6 turns Alarm: the series stays, at -1 (missing) / 2.
    write_scenario(scen, {**base, "devices": {**base["devices"], "5": {"gone": True},
                                              "6": {"health": "Alarm", "health_codes": ["8C084E00"]}}})
    m = wait_for(lambda: (lambda m: m if m.get("npu_watchdog_npus_seen") == 7 else None)(d.metrics()),
                 timeout=30, what="7 chips seen")
    assert m['npu_watchdog_npu_health{chip="0",npu="5"}'] == -1
    assert m['npu_watchdog_npu_health{chip="0",npu="6"}'] == 2
    assert m["npu_watchdog_npus_missing"] == 1 and m["npu_watchdog_npus_healthy"] == 6
    assert 'npu_watchdog_npu_aicore_utilization_ratio{chip="0",npu="5"}' not in m
    obs = wait_for(lambda: (lambda p: p if p.get("last_result") and "MISSING" in p["last_result"] else None)(
        [p for p in d.status()["probes"] if p["name"] == "npu"][0]), timeout=10, what="status shows missing")
    assert "npu 5 chip 0" in obs["last_result"]


def test_daemon_raises_npu_smi_failing_and_recovers(make_daemon, tmp_path):
    scen = tmp_path / "scenario.json"
    write_scenario(scen, {"behavior": "fail", "exit_code": 1})
    d = make_daemon(npu_config(), env={"FAKE_NPU_SMI_SCENARIO": str(scen)})
    wait_for(lambda: "npu_smi_failing" in rules(d), timeout=30, what="npu_smi_failing")
    assert "probe_down" not in rules(d)
    m = d.metrics()
    assert m['npu_watchdog_npu_smi_failures_total{reason="unavailable"}'] >= 1
    assert "npu_watchdog_npus_seen" not in m  # blind is not "zero NPUs"
    write_scenario(scen, {"generate": {"npus": 2}})
    wait_for(lambda: "npu_smi_failing" not in rules(d), timeout=30, what="npu_smi_failing cleared")
    wait_for(lambda: d.metrics().get("npu_watchdog_npus_seen") == 2, timeout=10, what="npus_seen 2")


def test_daemon_raises_npu_smi_hung(make_daemon, tmp_path):
    scen = tmp_path / "scenario.json"
    write_scenario(scen, {"behavior": "hang", "hang_child": True})
    d = make_daemon(npu_config(command_timeout="500ms"), env={"FAKE_NPU_SMI_SCENARIO": str(scen)})
    wait_for(lambda: "npu_smi_hung" in rules(d), timeout=30, what="npu_smi_hung")
    f = [f for f in d.status()["findings"] if f["rule"] == "npu_smi_hung"][0]
    assert f["severity"] == "critical" and f["labels"] == {"host": "node-t", "training_job": "job-t", "probe": "npu"}
    wait_for(lambda: d.metrics()['npu_watchdog_npu_smi_failures_total{reason="timeout"}'] >= 1, timeout=10,
             what="timeout counted")
    # One fault, one rule: the generic probe_down never doubles npu-smi's own finding.
    assert "probe_down" not in rules(d)


def test_daemon_raises_npu_smi_missing(make_daemon, tmp_path):
    d = make_daemon(npu_config(npu_smi=str(tmp_path / "nowhere" / "npu-smi")))
    wait_for(lambda: "npu_smi_missing" in rules(d), timeout=30, what="npu_smi_missing")
    assert "npu_smi_hung" not in rules(d) and "npu_smi_failing" not in rules(d)
    wait_for(lambda: d.log().count("probe npu failed: npu-smi missing:") >= 1, timeout=10, what="error logged")
    wait_for(lambda: d.metrics()['npu_watchdog_npu_smi_failures_total{reason="missing"}'] >= 3,
             timeout=30, what="several failed rounds")
    assert d.log().count("probe npu failed: npu-smi missing:") == 1  # a clear one-time error, not one per round


# --- the detector, pure ----------------------------------------------------------------------

def _view(status: ProbeStatus, now: float = 1000.0) -> StateView:
    return StateView(now=now, started_at=900.0, samples={}, statuses={"npu": status})


@pytest.fixture
def cfg():
    return load_config_text("node: {name: n}\njob: {name: j}\nprobes:\n  npu: {enabled: true, failing_after: 30s}\n")


def test_detector_failing_waits_for_failing_after(cfg):
    st = ProbeStatus("npu", 10, up=False, runs_total=5, errors_total=2, last_success=980.0,
                     last_error="npu-smi failing: exit code 1: boom", reason=FailureReason.EXIT)
    assert detect(_view(st, now=1000.0), cfg) == []
    found = detect(_view(st, now=1011.0), cfg)
    assert [f.rule for f in found] == ["npu_smi_failing"] and found[0].since == 980.0
    assert found[0].details["reason"] == "exit"


def test_detector_hung_from_scheduler_timeout_and_from_runner(cfg):
    st = ProbeStatus("npu", 10, up=False, runs_total=3, hung=True, last_error="round timed out after 20s")
    assert [f.rule for f in detect(_view(st), cfg)] == ["npu_smi_hung"]
    st = ProbeStatus("npu", 10, up=False, runs_total=3, last_error="npu-smi hung: `npu-smi info` gave no answer",
                     reason=FailureReason.TIMEOUT)
    assert [(f.rule, f.severity) for f in detect(_view(st), cfg)] == [("npu_smi_hung", "critical")]


def test_detector_quiet_when_up_or_unrelated(cfg):
    assert detect(_view(ProbeStatus("npu", 10, up=True, runs_total=3)), cfg) == []
    st = ProbeStatus("npu", 10, up=False, runs_total=3, last_error="ValueError: something else",
                     reason=FailureReason.UNEXPECTED)
    assert detect(_view(st, now=5000), cfg) == []


# --- the command ------------------------------------------------------------------------------

def cli(*args, env=None, stdin=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "watchdog", "npu-smi", *args], capture_output=True, text=True,
                          cwd=str(REPO), env=e, input=stdin, timeout=60)


DEVICE_TYPES = {"npu": (int,), "chip": (int,), "device_id": (int, type(None)), "name": (str,), "health": (str,),
                "power_w": (float, type(None)), "temp_c": (float, type(None)),
                "aicore_util_pct": (float, type(None)), "memory_used_mb": (int, type(None)),
                "memory_total_mb": (int, type(None)), "hbm_used_mb": (int, type(None)),
                "hbm_total_mb": (int, type(None)), "bus_id": (str, type(None))}
PROCESS_TYPES = {"npu": (int,), "chip": (int,), "pid": (int,), "name": (str,), "memory_mb": (int,)}


@pytest.mark.parametrize("name", ["info_910B3_8card_25.2.0_procs.txt", "info_310P3_Duo_4card_25.3.rc1.txt",
                                  "info_910_A3_16die_24.1.rc3.5_idle.txt"])
def test_cli_json_schema(name):
    r = cli("--from", str(FIX / name), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"version", "devices", "processes"}
    assert isinstance(data["version"], str)
    assert data["devices"]
    for dev in data["devices"]:
        assert set(dev) == set(DEVICE_TYPES)
        for k, types in DEVICE_TYPES.items():
            assert isinstance(dev[k], types), (k, dev[k])
    for p in data["processes"]:
        assert set(p) == set(PROCESS_TYPES)
        for k, types in PROCESS_TYPES.items():
            assert isinstance(p[k], types), (k, p[k])


def test_cli_json_values():
    data = json.loads(cli("--from", str(FIX / "info_310P3_Duo_4card_25.3.rc1.txt"), "--json").stdout)
    assert data["version"] == "25.3.rc1"
    assert data["devices"][5] == {"npu": 32768, "chip": 1, "device_id": 5, "name": "310P3", "health": "OK",
                                  "power_w": None, "temp_c": 46.0, "aicore_util_pct": 0.0,
                                  "memory_used_mb": 1391, "memory_total_mb": 43693, "hbm_used_mb": None,
                                  "hbm_total_mb": None, "bus_id": "0000:81:00.0"}
    data = json.loads(cli("--from", str(FIX / "info_910B3_8card_25.2.0_procs.txt"), "--json").stdout)
    assert data["processes"] == [{"npu": 2, "chip": 0, "pid": 1333928, "name": "", "memory_mb": 37709}]


@pytest.mark.parametrize("name", ["info_t_usages_910B3_25.5.1.txt", "npu-smi_error_in_container_-8020.txt"])
def test_cli_exit_2_on_unparseable_input(name):
    r = cli("--from", str(FIX / name))
    assert r.returncode == 2
    assert "npu-smi" in r.stderr and r.stdout == ""


def test_cli_stdin_and_text_output():
    r = cli("--from", "-", stdin=(FIX / "info_910B1_23.0.rc3.3_busy_excerpt.txt").read_text())
    assert r.returncode == 0, r.stderr
    assert "23.0.rc3.3" in r.stdout and "576489" in r.stdout
    r = cli("--from", "-", stdin="hello\n")
    assert r.returncode == 2 and "line 1" in r.stderr


def test_cli_live_against_the_fake(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"probes:\n  npu:\n    npu_smi: {FAKE}\n    command_timeout: 5s\n")
    r = cli("-c", str(cfg), "--json", env={"FAKE_NPU_SMI_CAPTURE": str(FIX / "info_910_8card_24.1.RC2_Warning_procs.txt")})
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [d["health"] for d in data["devices"]].count("Warning") == 2 and len(data["processes"]) == 32
    scen = tmp_path / "s.json"
    write_scenario(scen, {"behavior": "fail"})
    r = cli("-c", str(cfg), env={"FAKE_NPU_SMI_SCENARIO": str(scen), "FAKE_NPU_SMI_CAPTURE": ""})
    assert r.returncode == 1 and "ret is -8020" in r.stderr

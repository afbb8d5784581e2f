"""`npu-watchdog doctor` end to end: the real CLI as a subprocess against the fake npu-smi,
version files in a temporary root, fake training interpreters (a real python with a fake
site directory) and real processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from tests.helpers import REPO

FAKE_NPU_SMI = REPO / "tests" / "fakes" / "npu-smi"
CAPTURES = REPO / "tests" / "fixtures" / "npu-smi"


class Node:
    """A temporary node: version files under `root`, a fake npu-smi scenario, a config file."""

    def __init__(self, tmp: Path, scenario: Optional[Dict[str, Any]] = None, doctor: Optional[Dict[str, Any]] = None,
                 npu_timeout: str = "10s"):
        self.tmp = tmp
        self.root = tmp / "root"
        ascend = self.root / "usr/local/Ascend"
        (ascend / "driver").mkdir(parents=True)
        (ascend / "driver/version.info").write_text(
            "Version=23.0.6\nascendhal_version=7.35.19\naicpu_version=1.0\nInnerversion=V100R001C15SPC005B220\n")
        (ascend / "firmware").mkdir()
        (ascend / "firmware/version.info").write_text("Version=7.1.0.5.220\nfirmware_version=1.0\n")
        (ascend / "ascend-toolkit/latest").mkdir(parents=True)
        (ascend / "ascend-toolkit/latest/version.cfg").write_text(textwrap.dedent("""\
            # version: 1.0
            runtime_running_version=[7.5.0.1.129:8.0.RC3]
            compiler_running_version=[7.5.0.1.129:8.0.RC3]
            opp_running_version=[7.5.0.1.129:8.0.RC3]
            toolkit_running_version=[7.5.0.1.129:8.0.RC3]
            hccl_running_version=[7.5.0.1.129:8.0.RC3]
            """))
        self.scenario_path = tmp / "scenario.json"
        self.set_scenario(scenario or {})
        cfg_doctor = {
            "driver_version_file": str(ascend / "driver/version.info"),
            "firmware_version_file": str(ascend / "firmware/version.info"),
            "cann_version_files": [str(ascend / "ascend-toolkit/latest/version.cfg")],
            "expected_devices": 8,
            "python_timeout": "30s",
            "smoke_timeout": "60s",
        }
        cfg_doctor.update(doctor or {})
        self.config = {
            "node": {"name": "node-t"},
            "job": {"name": "job-t"},
            "paths": {"state_dir": str(tmp / "state")},
            # Reachable from on-call people's screens (a loopback listen makes runbook links warn).
            "http": {"listen": "0.0.0.0:9841"},
            "probes": {"npu": {"npu_smi": str(FAKE_NPU_SMI), "command_timeout": npu_timeout}},
            "doctor": cfg_doctor,
        }
        self.config_path = tmp / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.env_file = tmp / "job.env"
        self.env_file.write_text("export ASCEND_GLOBAL_LOG_LEVEL=3\nHCCL_CONNECT_TIMEOUT=1200\n")

    def set_scenario(self, scenario: Dict[str, Any]) -> None:
        self.scenario_path.write_text(json.dumps(scenario))

    def doctor(self, *args: str, env: Optional[Dict[str, str]] = None, timeout: float = 120) -> "Result":
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "HCCL_", "FAKE_NPU_SMI"))}
        full_env["FAKE_NPU_SMI_SCENARIO"] = str(self.scenario_path)
        full_env["FAKE_NPU_SMI_COUNTER"] = str(self.tmp / "calls")
        full_env.update(env or {})
        argv = [sys.executable, "-m", "watchdog", "doctor", "-c", str(self.config_path), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, env=full_env, cwd=str(REPO), timeout=timeout)
        return Result(proc)


class Result:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.code = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self._json: Optional[Dict[str, Any]] = None

    @property
    def data(self) -> Dict[str, Any]:
        if self._json is None:
            self._json = json.loads(self.stdout)
        return self._json

    def check(self, cid: str) -> Dict[str, Any]:
        found = [c for c in self.data["checks"] if c["id"] == cid]
        assert found, f"no check {cid}; have {[c['id'] for c in self.data['checks']]}\n{self.stderr}"
        return found[0]

    def status(self, cid: str) -> str:
        return self.check(cid)["status"]

    def with_status(self, status: str) -> List[str]:
        return [c["id"] for c in self.data["checks"] if c["status"] == status]


def fake_python(tmp: Path, name: str, packages: Dict[str, str], modules: Optional[Dict[str, str]] = None) -> Path:
    """A 'training interpreter': the real python, with a site directory holding installed-package
    metadata (and optional module sources) of our choosing."""
    site = tmp / f"site-{name}"
    site.mkdir()
    for dist, version in packages.items():
        info = site / f"{dist}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    for mod, source in (modules or {}).items():
        pkg = site / mod
        pkg.mkdir()
        (pkg / "__init__.py").write_text(source)
    exe = tmp / f"python-{name}"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -s \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


# --- whole node ------------------------------------------------------------------------------

def test_healthy_node(tmp_path):
    node = Node(tmp_path)
    r = node.doctor("--json", "--env-file", str(node.env_file))
    assert r.with_status("fail") == [], r.stdout
    # Without channels (alerting is configured elsewhere) the only warning is that one.
    assert r.with_status("warn") == ["daemon.channels"], r.stdout
    assert r.code == 1
    assert r.status("devices.count") == "pass"
    assert r.status("devices.health") == "pass"
    assert r.status("devices.processes") == "pass"
    assert r.status("devices.free_memory") == "pass"
    assert r.status("daemon.npu_smi") == "pass"
    assert r.status("daemon.state_dir") == "pass"
    assert r.data["versions"]["driver"] == "23.0.6"
    assert r.data["versions"]["npu_smi"] == "23.0.6"
    assert r.data["versions"]["cann"] == "8.0.RC3"
    assert r.data["versions"]["firmware"] == "7.1.0.5.220"
    assert len(r.data["cards"]) == 8
    # --warn-exit 0: warnings do not fail the preflight.
    assert node.doctor("--json", "--env-file", str(node.env_file), "--warn-exit", "0").code == 0


def test_table_output_is_readable(tmp_path):
    node = Node(tmp_path, {"devices": {"3": {"health": "Alarm", "health_codes": ["8C084E00"]}}})
    r = node.doctor("--env-file", str(node.env_file))
    assert r.code == 2
    line = [ln for ln in r.stdout.splitlines() if "devices.health" in ln][0]
    assert line.split()[0] == "FAIL" and "8C084E00" in line
    assert "pass," in r.stdout.splitlines()[-1] and "fail" in r.stdout.splitlines()[-1]


def test_card_in_alarm_shows_codes(tmp_path):
    node = Node(tmp_path, {"devices": {"3": {"health": "Alarm", "health_codes": ["8C084E00", "A4025021"],
                                            "health_info": ["adda heart beat lost"]}}})
    r = node.doctor("--json", "--env-file", str(node.env_file))
    assert r.code == 2
    health = r.check("devices.health")
    assert health["status"] == "fail"
    assert "NPU 3 chip 0 Alarm" in health["reason"]
    assert health["details"]["unhealthy"] == [{"npu": 3, "chip": 0, "health": "Alarm",
                                               "codes": ["8C084E00", "A4025021"]}]


def test_card_in_warning_is_a_warning(tmp_path):
    node = Node(tmp_path, {"devices": {"6": {"health": "Warning"}}})
    r = node.doctor("--json", "--env-file", str(node.env_file))
    assert r.status("devices.health") == "warn"
    assert r.code == 1


def test_missing_card(tmp_path):
    node = Node(tmp_path, {"devices": {"5": {"gone": True}}})
    r = node.doctor("--json", "--env-file", str(node.env_file))
    assert r.code == 2
    count = r.check("devices.count")
    assert count["status"] == "fail"
    assert "7 of 8" in count["reason"]
    # --expect overrides the configured count.
    r = node.doctor("--json", "--env-file", str(node.env_file), "--expect", "7")
    assert r.status("devices.count") == "pass"


def test_stale_process_on_a_card(tmp_path):
    node = Node(tmp_path, {"processes": [{"npu": 2, "chip": 0, "pid": 1333928, "name": "python3", "memory_mb": 37709}],
                           "devices": {"2": {"hbm_used_mb": 41109}}})
    r = node.doctor("--json", "--env-file", str(node.env_file))
    assert r.code == 2
    procs = r.check("devices.processes")
    assert procs["status"] == "fail"
    assert "pid 1333928" in procs["reason"] and "NPU 2" in procs["reason"]
    assert "EJ0001" in procs["advice"]
    assert r.status("devices.free_memory") == "warn"


def test_running_job_given_by_pid(tmp_path):
    """--pid: the job's own process on a card is expected, and its environment is read from /proc."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "HCCL_"))}
    env.update({"ASCEND_GLOBAL_LOG_LEVEL": "0", "HCCL_EXEC_TIMEOUT": "300", "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,9"})
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    try:
        node = Node(tmp_path, {"processes": [{"npu": 0, "chip": 0, "pid": job.pid, "name": "python", "memory_mb": 30000}]})
        r = node.doctor("--json", "--pid", str(job.pid))
        assert r.status("devices.processes") == "pass", r.check("devices.processes")
        assert r.check("env.source")["reason"].endswith(f"process {job.pid}")
        assert r.status("env.ASCEND_GLOBAL_LOG_LEVEL") == "warn"
        assert r.status("env.HCCL_EXEC_TIMEOUT") == "warn"
        vis = r.check("env.ASCEND_RT_VISIBLE_DEVICES")
        assert vis["status"] == "fail" and "[9]" in vis["reason"]
        assert r.data["environment"]["ASCEND_GLOBAL_LOG_LEVEL"] == "0"
    finally:
        job.kill()
        job.wait()
    # A pid that does not exist is a clear failure of the env source, not a crash.
    r = node.doctor("--json", "--pid", str(job.pid))
    assert r.status("env.source") == "fail"
    assert f"no process {job.pid}" in r.check("env.source")["reason"]


def test_debug_log_level_and_env_rules(tmp_path):
    node = Node(tmp_path)
    node.env_file.write_text(textwrap.dedent("""\
        # launch script excerpt
        export ASCEND_GLOBAL_LOG_LEVEL=0
        export HCCL_DETERMINISTIC=true
        export PYTORCH_NPU_ALLOC_CONF="expandable_segments:True"
        export HCCL_CONNECT_TIMEOUT=60
        torchrun --nproc_per_node 8 train.py
        """))
    r = node.doctor("--json", "--env-file", str(node.env_file))
    level = r.check("env.ASCEND_GLOBAL_LOG_LEVEL")
    assert level["status"] == "warn" and "DEBUG" in level["reason"]
    assert r.status("env.HCCL_DETERMINISTIC") == "warn"
    assert r.status("env.PYTORCH_NPU_ALLOC_CONF") == "pass"
    assert "expandable segments on" in r.check("env.PYTORCH_NPU_ALLOC_CONF")["reason"]
    assert r.status("env.HCCL_CONNECT_TIMEOUT") == "warn"
    assert r.code == 1
    assert r.data["environment"]["ASCEND_GLOBAL_LOG_LEVEL"] == "0"
    # The level that is fine for a long run passes.
    node.env_file.write_text("ASCEND_GLOBAL_LOG_LEVEL=3\n")
    assert node.doctor("--json", "--env-file", str(node.env_file)).status("env.ASCEND_GLOBAL_LOG_LEVEL") == "pass"


# --- versions in the training interpreter ----------------------------------------------------

def test_mismatched_torch_and_torch_npu_is_a_failure(tmp_path):
    py = fake_python(tmp_path, "mismatch", {"torch": "2.1.0", "torch_npu": "2.3.1.post2"})
    node = Node(tmp_path)
    r = node.doctor("--json", "--env-file", str(node.env_file), "--python", str(py))
    assert r.code == 2
    mm = r.check("versions.torch_torch_npu")
    assert mm["status"] == "fail"
    assert "built for torch 2.3.1" in mm["reason"] and "found torch 2.1.0" in mm["reason"]
    assert "github.com/Ascend/pytorch" in mm["advice"]  # the rule's source is cited
    assert r.data["versions"]["torch"] == "2.1.0"
    assert r.data["versions"]["torch_npu"] == "2.3.1.post2"


def test_matching_versions_and_cann_table(tmp_path):
    node = Node(tmp_path)
    good = fake_python(tmp_path, "good", {"torch": "2.1.0", "torch_npu": "2.1.0.post8"})
    r = node.doctor("--json", "--env-file", str(node.env_file), "--python", str(good))
    assert r.status("versions.training_python") == "pass"
    assert r.status("versions.torch_torch_npu") == "pass"
    assert r.status("versions.torch_npu_cann") == "pass"   # 2.1.0.post8 is released for CANN 8.0.RC3
    # A torch_npu made for another CANN: a warning with both versions shown, not a failure.
    other = fake_python(tmp_path, "other", {"torch": "2.1.0", "torch_npu": "2.1.0.post3"})
    r = node.doctor("--json", "--env-file", str(node.env_file), "--python", str(other))
    tc = r.check("versions.torch_npu_cann")
    assert tc["status"] == "warn"
    assert "CANN 8.0.RC1" in tc["reason"] and "CANN 8.0.RC3" in tc["reason"]


def test_missing_interpreter_fails_clearly(tmp_path):
    node = Node(tmp_path)
    r = node.doctor("--json", "--env-file", str(node.env_file), "--python", str(tmp_path / "nope" / "python"))
    tp = r.check("versions.training_python")
    assert tp["status"] == "fail" and "nope" in tp["reason"]


def test_smoke_without_torch_npu_is_skipped(tmp_path):
    py = fake_python(tmp_path, "notorchnpu", {"torch": "2.1.0"}, modules={"torch": "__version__ = '2.1.0'\n"})
    node = Node(tmp_path)
    r = node.doctor("--json", "--env-file", str(node.env_file), "--python", str(py), "--smoke")
    smoke = r.check("smoke.import")
    assert smoke["status"] == "skipped"
    assert smoke["reason"].startswith("torch_npu not importable: ")
    assert "torch_npu" in smoke["reason"].split(": ", 1)[1]
    npu = r.check("versions.torch_npu")
    assert npu["status"] == "warn" and "not installed" in npu["reason"]


def test_smoke_failure_in_import_is_reported_with_its_reason(tmp_path):
    """torch_npu present but broken (no CANN): the import error text is the reason."""
    py = fake_python(tmp_path, "nocann", {"torch": "2.1.0", "torch_npu": "2.1.0.post8"}, modules={
        "torch": "__version__ = '2.1.0'\n",
        "torch_npu": "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n",
    })
    node = Node(tmp_path)
    r = node.doctor("--json", "--env-file", str(node.env_file), "--python", str(py), "--smoke")
    smoke = r.check("smoke.import")
    assert smoke["status"] == "skipped"
    assert "libhccl.so" in smoke["reason"]


def test_smoke_without_interpreter(tmp_path):
    node = Node(tmp_path)
    r = node.doctor("--json", "--env-file", str(node.env_file), "--smoke")
    assert r.status("smoke.import") == "skipped"


# --- npu-smi and config trouble --------------------------------------------------------------

def test_npu_smi_failure_text_is_a_failure_not_zero_cards(tmp_path):
    node = Node(tmp_path, {"behavior": "fail"})
    r = node.doctor("--json", "--env-file", str(node.env_file))
    assert r.code == 2
    assert r.status("daemon.npu_smi") == "fail"
    assert "-8020" in r.check("daemon.npu_smi")["reason"]
    assert r.status("devices.npu_smi") == "fail"
    assert not any(c["id"] == "devices.count" for c in r.data["checks"])


def test_npu_smi_hang_is_timed_out(tmp_path):
    node = Node(tmp_path, {"behavior": "hang", "hang_child": True}, npu_timeout="1s")
    r = node.doctor("--json", "--env-file", str(node.env_file), timeout=60)
    assert r.code == 2
    reason = r.check("daemon.npu_smi")["reason"]
    assert reason.startswith("npu-smi hung:") and "1s" in reason


def test_npu_smi_missing(tmp_path):
    node = Node(tmp_path)
    node.config["probes"]["npu"]["npu_smi"] = str(tmp_path / "no-such-npu-smi")
    node.config_path.write_text(yaml.safe_dump(node.config))
    r = node.doctor("--json", "--env-file", str(node.env_file))
    assert r.code == 2
    assert r.check("daemon.npu_smi")["reason"].startswith("npu-smi missing:")
    assert r.status("versions.npu_smi") == "skipped"
    assert r.status("versions.driver") == "pass"   # file-based checks still run


def test_invalid_config_is_reported_and_defaults_used(tmp_path):
    node = Node(tmp_path)
    node.config_path.write_text("doctor:\n  min_free_hbm_ratio: 3\n  bogus: 1\n")
    r = node.doctor("--json", "--env-file", str(node.env_file))
    cfg = r.check("daemon.config")
    assert cfg["status"] == "fail"
    assert any("doctor.bogus: unknown key" in e for e in cfg["details"]["errors"])
    assert r.code == 2


def test_unusable_state_dir(tmp_path):
    node = Node(tmp_path)
    (tmp_path / "state").write_text("a file where the state directory should be\n")
    r = node.doctor("--json", "--env-file", str(node.env_file))
    sd = r.check("daemon.state_dir")
    assert sd["status"] == "fail" and "not a directory" in sd["reason"]
    assert r.code == 2


# --- record and compare ----------------------------------------------------------------------

def test_record_and_compare(tmp_path):
    node = Node(tmp_path)
    py = fake_python(tmp_path, "rec", {"torch": "2.1.0", "torch_npu": "2.1.0.post8"})
    day1 = tmp_path / "ckpt" / "day1"
    r = node.doctor("--env-file", str(node.env_file), "--python", str(py), "--record", str(day1))
    rec1 = day1 / "environment.json"
    assert rec1.is_file(), r.stderr
    assert stat.S_IMODE(rec1.stat().st_mode) == 0o600
    data = json.loads(rec1.read_text())
    assert data["versions"]["torch_npu"] == "2.1.0.post8"
    assert data["environment"]["HCCL_CONNECT_TIMEOUT"] == "1200"
    assert len(data["cards"]) == 8 and data["timestamp"] > 0
    assert {c["id"] for c in data["checks"]} >= {"devices.health", "versions.cann", "env.HCCL_EXEC_TIMEOUT"}

    # The next day: a card is gone, the log level was raised, torch_npu was upgraded.
    node.set_scenario({"devices": {"5": {"gone": True}}})
    node.env_file.write_text("ASCEND_GLOBAL_LOG_LEVEL=1\nHCCL_CONNECT_TIMEOUT=1200\n")
    py2 = fake_python(tmp_path, "rec2", {"torch": "2.1.0", "torch_npu": "2.1.0.post10"})
    day2 = tmp_path / "ckpt" / "day2"
    node.doctor("--env-file", str(node.env_file), "--python", str(py2), "--record", str(day2))

    cmp = node.doctor("--compare", str(rec1), str(day2))   # a directory works too
    assert cmp.code == 1, cmp.stderr
    out = cmp.stdout
    assert "versions.torch_npu" in out and "2.1.0.post8  ->  2.1.0.post10" in out
    assert "environment.ASCEND_GLOBAL_LOG_LEVEL" in out and "3  ->  1" in out
    assert "cards.NPU 5 chip 0" in out and "present  ->  absent" in out
    assert "checks.devices.count" in out and "pass  ->  fail" in out

    js = node.doctor("--compare", str(rec1), str(day2), "--json")
    diffs = json.loads(js.stdout)["differences"]
    assert {"section": "versions", "key": "torch_npu", "a": "2.1.0.post8", "b": "2.1.0.post10"} in diffs

    same = node.doctor("--compare", str(rec1), str(rec1))
    assert same.code == 0 and "no differences" in same.stdout

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    broken = node.doctor("--compare", str(rec1), str(bad))
    assert broken.code == 2 and "not JSON" in broken.stderr

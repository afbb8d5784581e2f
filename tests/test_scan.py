"""`npu-watchdog scan` as a real subprocess: JSON shape, timeline, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import FIXTURES, REPO

SAMPLES = Path(__file__).parent / "samples" / "logs"


def scan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "watchdog", "scan", *args], capture_output=True, text=True,
                          cwd=str(REPO), timeout=60)


def test_scan_json_shape_and_exit_1(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("step 1 loss 2.3\n"
                   "RuntimeError: NPU out of memory. Tried to allocate 1.00 GiB (NPU 0; 60 GiB total)\n"
                   "Traceback (most recent call last):\n"
                   "  File \"train.py\", line 3, in <module>\n"
                   "RuntimeError: boom\n"
                   "[E ProcessGroupHCCL.cpp:1] [Rank 0] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=1)\n")
    r = scan("--json", str(log))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"events", "first"}
    ev = doc["events"]
    assert [(e["line"], e["rule"], e["role"]) for e in ev] == [
        (2, "oom_torch_npu", "root"), (3, "python_traceback", "cascade"),
        (6, "hccl_collective_watchdog_timeout", "cascade")]
    for e in ev:
        assert set(e) == {"file", "line", "rule", "category", "severity", "role", "text"}
        assert e["file"] == str(log)
    assert ev[1]["text"] == "RuntimeError: boom"  # a traceback's summary is its last line
    assert doc["first"]["oom"]["line"] == 2 and set(doc["first"]) == {"oom", "traceback", "hccl"}


def test_scan_timeline_nothing_found_and_errors(tmp_path: Path) -> None:
    r = scan(str(SAMPLES / "near_misses.log"))
    assert r.returncode == 0 and "no failure signatures" in r.stdout
    r = scan(str(FIXTURES / "logs" / "plog_hccl_notify_wait_timeout_heartbeat_lost.log"))
    assert r.returncode == 1
    assert "Cascades" in r.stdout and "hccl_heartbeat_lost" in r.stdout
    assert scan(str(tmp_path / "missing.log")).returncode == 2
    assert scan("--rules", "bogus", str(SAMPLES / "oom.log")).returncode == 2
    # --rules restricts packs: the OOM sample has nothing for the nan pack
    r = scan("--json", "--rules", "nan", str(SAMPLES / "oom.log"))
    assert r.returncode == 0 and json.loads(r.stdout)["events"] == []


def test_scan_applies_config_rules(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("probes:\n  logs:\n    disable: [oom_torch_npu]\n    rules:\n"
                   "      - id: my_rule\n        patterns: ['checkpoint save failed']\n        severity: critical\n")
    log = tmp_path / "x.log"
    log.write_text("NPU out of memory. Tried to allocate 1 MiB\ncheckpoint save failed: disk full\n")
    r = scan("--json", "-c", str(cfg), str(log))
    assert r.returncode == 1, r.stderr
    assert [(e["rule"], e["category"]) for e in json.loads(r.stdout)["events"]] == [("my_rule", "custom")]

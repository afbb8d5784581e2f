"""Snapshots through the real daemon (a critical command check fires) and the on-demand command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import yaml

from tests.helpers import REPO, wait_for


def _manifest(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        top = os.path.basename(str(archive))[: -len(".tar.gz")]
        return json.load(tar.extractfile(f"{top}/manifest.json"))


def _member(archive: Path, name: str) -> str:
    with tarfile.open(archive) as tar:
        top = os.path.basename(str(archive))[: -len(".tar.gz")]
        return tar.extractfile(f"{top}/{name}").read().decode()


def test_critical_command_check_triggers_a_snapshot(make_daemon, tmp_path):
    snaps = tmp_path / "snaps"
    log = tmp_path / "train.log"
    log.write_text("step 10 loss 1.5\n")
    d = make_daemon({
        "paths": {"state_dir": str(tmp_path / "state"), "snapshot_dir": str(snaps)},
        "probes": {
            "logs": {"sources": [{"name": "train", "paths": [str(log)]}]},
            "commands": [{"name": "fs_gone", "argv": ["/bin/false"], "interval": "1s", "timeout": "5s",
                          "severity": "critical"},
                         {"name": "minor", "argv": ["/bin/false"], "interval": "1s", "timeout": "5s",
                          "severity": "warning"}],
        },
        "snapshots": {"enabled": True, "min_free_space": "1MiB", "budget": "10s", "dmesg_lines": 10},
    })
    archives = wait_for(lambda: sorted(snaps.glob("*.tar.gz")), timeout=60, what="a snapshot archive")
    assert len(archives) == 1, archives  # the warning-level check takes none
    archive = archives[0]
    assert archive.name.endswith("-node-t-command_check.tar.gz")
    m = _manifest(archive)
    assert m["trigger"]["finding"]["rule"] == "command_check"
    assert m["trigger"]["finding"]["labels"]["check"] == "fs_gone"
    assert m["host"] == "node-t" and m["training_job"] == "job-t"
    findings = json.loads(_member(archive, "daemon/findings.json"))
    assert any(f["labels"].get("check") == "fs_gone" for f in findings)
    assert "step 10 loss 1.5" in _member(archive, f"logs/train/{str(log).lstrip('/')}")
    # The alert log names the archive path.
    wait_for(lambda: f"snapshot of command_check: {archive}" in d.log(), what="snapshot path in the log")
    metrics = wait_for(lambda: (lambda m: m if m.get('npu_watchdog_snapshots_total{result="taken"}') == 1 else None)(
        d.metrics()), what="taken metric")
    assert metrics['npu_watchdog_snapshots_total{result="failed"}'] == 0
    assert metrics['npu_watchdog_snapshots_skipped_total{reason="low_disk"}'] == 0
    assert metrics["npu_watchdog_snapshot_disk_bytes"] == archive.stat().st_size
    assert metrics["npu_watchdog_snapshot_last_duration_seconds"] > 0


def test_metrics_start_at_zero_when_disabled(make_daemon, tmp_path):
    d = make_daemon({})
    m = d.metrics()
    for r in ("taken", "failed", "skipped"):
        assert m[f'npu_watchdog_snapshots_total{{result="{r}"}}'] == 0
    for reason in ("rate_limited", "low_disk", "busy", "unavailable"):
        assert m[f'npu_watchdog_snapshots_skipped_total{{reason="{reason}"}}'] == 0
    assert m["npu_watchdog_snapshot_disk_bytes"] == 0


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True,
                          timeout=120, cwd=str(REPO))


def test_on_demand_command_prints_the_archive_path(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        open(sys.argv[1], "w").close()
        time.sleep(600)
    """))
    marker = tmp_path / "ready"
    job = subprocess.Popen([sys.executable, str(script), str(marker)], env=dict(os.environ, HCCL_EXEC_TIMEOUT="1836"))
    try:
        wait_for(marker.exists, what="job started")
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({
            "node": {"name": "node-c"}, "job": {"name": "job-c"},
            "paths": {"state_dir": str(tmp_path / "state")},
            # Snapshots need not be enabled for an explicit request.
            "snapshots": {"min_free_space": "1MiB", "dmesg_lines": 0},
        }))
        out = _cli("snapshot", "-c", str(cfg), "--reason", "rank 3 looks stuck", "--pid", str(job.pid))
    finally:
        job.kill()
        job.wait()
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip())
    assert path.parent == tmp_path / "state" / "snapshots" and path.exists()
    assert path.name.endswith("-node-c-manual.tar.gz")
    m = _manifest(path)
    assert m["trigger"]["kind"] == "manual" and m["trigger"]["finding"]["summary"] == "rank 3 looks stuck"
    assert m["job_processes"] == {str(job.pid): None}
    assert "HCCL_EXEC_TIMEOUT=1836" in _member(path, f"env/{job.pid}.txt")

    # Below the free-space floor: nothing written, a clear reason, exit 1.
    cfg.write_text(yaml.safe_dump({"paths": {"state_dir": str(tmp_path / "state")},
                                   "snapshots": {"min_free_space": "1000TB"}}))
    out = _cli("snapshot", "-c", str(cfg))
    assert out.returncode == 1 and "low_disk" in out.stderr and out.stdout == ""

"""The real daemon tailing a real file: NaN finding, OOM root with a folded HCCL cascade, metrics."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import wait_for


def _findings(d, rule=None):
    return [f for f in d.status()["findings"] if rule is None or f["rule"] == rule]


def test_daemon_log_findings_cascade_and_metrics(make_daemon, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank3.log"
    log.write_text("old line from before the daemon: loss: nan\n")  # read from the end: ignored
    d = make_daemon({
        "probes": {"logs": {
            "enabled": True, "interval": "1s", "hold": "1h", "cascade_window": "10m",
            "sources": [{"name": "train", "paths": [str(logdir / "*.log")]}],
            "rules": [{"id": "my_ckpt_fail", "patterns": ["checkpoint save failed"]}],
        }},
    })
    m = wait_for(lambda: (lambda m: m if m.get('npu_watchdog_log_files_followed{source="train"}') == 1 else None)(d.metrics()),
                 what="log file followed")
    # every shipped and configured rule has a zero series before any match
    assert m['npu_watchdog_log_matches_total{category="oom",rule="oom_torch_npu"}'] == 0
    assert m['npu_watchdog_log_matches_total{category="custom",rule="my_ckpt_fail"}'] == 0
    assert m['npu_watchdog_log_rotations_total{source="train"}'] == 0
    assert not _findings(d, "log_nan")

    with open(log, "a") as fh:
        fh.write("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}\n")
    nan = wait_for(lambda: _findings(d, "log_nan"), what="log_nan finding")[0]
    assert nan["labels"]["log_rule"] == "nan_loss_value" and nan["labels"]["rank"] == "3"
    assert nan["labels"]["host"] == "node-t" and nan["labels"]["training_job"] == "job-t"
    assert "'loss': nan" in nan["evidence"][0] and nan["severity"] == "critical"

    with open(log, "a") as fh:
        fh.write("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 3; 60.97 GiB total capacity)\n")
        fh.write("[rank3]:[E ProcessGroupHCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
                 "WorkHCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800027 milliseconds\n")
    oom = wait_for(lambda: _findings(d, "log_oom"), what="log_oom finding")[0]
    # the HCCL timeout after the OOM is folded into the OOM finding, not a finding of its own
    wait_for(lambda: _findings(d, "log_oom")[0]["details"]["symptoms"], what="folded symptom")
    oom = _findings(d, "log_oom")[0]
    assert oom["labels"]["log_rule"] == "oom_torch_npu"
    assert [s["rule"] for s in oom["details"]["symptoms"]] == ["hccl_collective_watchdog_timeout"]
    assert any("Watchdog caught collective" in e for e in oom["evidence"])
    assert _findings(d, "log_hccl") == []
    m = d.metrics()
    assert m['npu_watchdog_log_matches_total{category="hccl",rule="hccl_collective_watchdog_timeout"}'] == 1
    assert m['npu_watchdog_log_matches_total{category="oom",rule="oom_torch_npu"}'] == 1
    assert m['npu_watchdog_log_lines_read_total{source="train"}'] == 3
    assert m['npu_watchdog_log_bytes_read_total{source="train"}'] > 100
    assert m['npu_watchdog_log_read_lag_seconds{source="train"}'] == 0
    assert (tmp_path / "state" / "log-offsets.json").stat().st_mode & 0o777 == 0o600

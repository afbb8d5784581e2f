"""`--token VALUE` (the separate-argument form) never leaves the node: not in snapshots, not in
findings, alerts or `status`, wherever a command line is captured."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import uuid

import yaml

from tests.helpers import REPO, wait_for
from watchdog.privacy.argv import redact_argv
from watchdog.privacy.redact import REDACTED

SECRETS = ("tok-A1b2C3d4E5", "pw-Z9y8X7w6", "key-Q1w2E3r4", "hf-M5n6B7v8")


def _job(marker: str) -> subprocess.Popen:
    argv = [sys.executable, "-c", "import time; time.sleep(300)", marker,
            "--token", SECRETS[0], "--password", SECRETS[1], "--api-key=" + SECRETS[2], "HF_TOKEN=" + SECRETS[3],
            "--tokenizer", "gpt2", "--max-tokens", "512"]
    return subprocess.Popen(argv)


def test_redact_argv_forms():
    argv = ["train.py", "--token", "abc", "--password", "--verbose", "--api-key=k1", "-auth", "x",
            "WANDB_API_KEY=w1", "--tokenizer", "gpt2", "--max-tokens", "512", "--token"]
    out, found = redact_argv(argv)
    assert out == ("train.py", "--token", REDACTED, "--password", "--verbose", f"--api-key={REDACTED}", "-auth",
                   REDACTED, f"WANDB_API_KEY={REDACTED}", "--tokenizer", "gpt2", "--max-tokens", "512", "--token")
    assert found == ["abc", "k1", "x", "w1"]


def test_snapshot_archive_holds_no_argument_secret(tmp_path):
    marker = f"argv-{uuid.uuid4().hex[:8]}"
    job = _job(marker)
    try:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({"paths": {"state_dir": str(tmp_path / "state")},
                                       "snapshots": {"min_free_space": "1MiB", "dmesg_lines": 0}}))
        out = subprocess.run([sys.executable, "-m", "watchdog", "snapshot", "-c", str(cfg), "--pid", str(job.pid)],
                             capture_output=True, text=True, cwd=str(REPO), timeout=120)
    finally:
        job.kill()
        job.wait()
    assert out.returncode == 0, out.stderr
    blob = b""
    with tarfile.open(out.stdout.strip()) as tar:
        for m in tar.getmembers():
            if m.isfile():
                blob += tar.extractfile(m).read()
    text = blob.decode("utf-8", "replace")
    assert marker in text and "--tokenizer gpt2" in text
    for s in SECRETS:
        assert s not in text, s
    assert f"--token {REDACTED} --password {REDACTED} --api-key={REDACTED}" in text


def test_findings_and_status_hold_no_argument_secret(make_daemon):
    marker = f"argv-{uuid.uuid4().hex[:8]}"
    job = _job(marker)
    try:
        d = make_daemon({"probes": {"process": {"enabled": True, "interval": "0.5s", "cmdline": marker,
                                                "stopped_after": "1s"}}})
        os.kill(job.pid, signal.SIGSTOP)
        status = wait_for(lambda: (lambda s: s if any(f["rule"] == "rank_stopped" for f in s["findings"]) else None)(
            d.status()), timeout=30, what="rank_stopped finding")
        text = str(status) + d.metrics_text() + d.log()
        assert marker in str(status)
        for s in SECRETS:
            assert s not in text, s
    finally:
        job.kill()
        job.wait()

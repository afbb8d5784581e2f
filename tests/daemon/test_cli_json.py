"""Scriptable output (`--json` on snapshot, test-alert and silence list) and shell completion,
each through the real CLI in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.fakes.receivers import Receiver
from tests.helpers import REPO


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True,
                          cwd=str(REPO), timeout=timeout)


def config(tmp_path, **sections):
    doc = {"node": {"name": "n1"}, "job": {"name": "j1"},
           "paths": {"state_dir": str(tmp_path / "state"), "snapshot_dir": str(tmp_path / "snaps")}, **sections}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_test_alert_json_gives_each_channel_verdict_without_secrets(tmp_path):
    with Receiver("feishu", secret="good") as ok, Receiver("feishu", secret="good") as bad:
        cfg = config(tmp_path, alerting={"channels": [
            {"type": "feishu", "name": "good", "url": ok.url, "secret": "good"},
            {"type": "feishu", "name": "badsig", "url": bad.url, "secret": "wrong-secret-value"},
            {"type": "feishu", "name": "quiet", "url": ok.url, "min_severity": "critical"}]})
        out = cli("test-alert", "-c", cfg, "--json")
        assert out.returncode == 1, out.stderr
        res = {r["channel"]: r for r in json.loads(out.stdout)}
        assert res["good"]["result"] == "delivered" and res["good"]["http_status"] == 200
        assert res["badsig"]["result"] == "failed" and res["badsig"]["retryable"] is False
        assert "19021" in res["badsig"]["detail"]
        assert res["quiet"]["result"] == "skipped"
        assert "wrong-secret-value" not in out.stdout and "fake-feishu-token" not in out.stdout


def test_silence_list_json(tmp_path):
    cfg = config(tmp_path)
    # No daemon has run with this state folder yet: an empty list (and exit 1, with the reason).
    first = cli("silence", "list", "-c", cfg, "--json")
    assert json.loads(first.stdout) == [] and "no alert state" in first.stderr
    add = cli("silence", "add", "-c", cfg, "--match", "rule=log_nan", "--for", "2h", "--comment", "bad batch")
    assert add.returncode == 0, add.stderr
    [s] = json.loads(cli("silence", "list", "-c", cfg, "--json").stdout)
    assert s["state"] == "active" and s["matchers"] == ["rule=log_nan"] and s["comment"] == "bad batch"
    assert s["ends_at"].endswith("Z") and s["ends_at_epoch"] - s["starts_at_epoch"] == pytest.approx(7200, abs=2)


def test_snapshot_json(tmp_path):
    cfg = config(tmp_path, probes={"npu": {"npu_smi": str(REPO / "tests" / "fakes" / "npu-smi")}})
    out = cli("snapshot", "-c", cfg, "--reason", "by hand", "--json", timeout=200)
    doc = json.loads(out.stdout)
    assert doc["taken"] is True and doc["path"].startswith(str(tmp_path / "snaps")), doc
    assert out.returncode == 0


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_comes_from_the_parser(tmp_path):
    out = cli("completion", "bash")
    assert out.returncode == 0
    script = tmp_path / "c.sh"
    script.write_text(out.stdout)
    probe = f"""
source {script}
try() {{ COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _npu_watchdog; echo "${{COMPREPLY[*]}}"; }}
try npu-watchdog si
try npu-watchdog silence ""
try npu-watchdog silence list --j
try npu-watchdog completion ""
"""
    lines = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert lines == ["silence", "add list remove", "--json", "bash"]

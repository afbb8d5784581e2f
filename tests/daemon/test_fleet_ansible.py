"""contrib/ansible: the playbook parses, and really rolls out to localhost into a temporary root.

Ansible comes from Debian's `ansible-core` package (installed by .ci/system-packages) or any
`ansible-playbook` on PATH; without it these tests skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO

PLAYBOOK = REPO / "contrib" / "ansible" / "playbook.yml"
ANSIBLE = shutil.which("ansible-playbook")

pytestmark = pytest.mark.skipif(ANSIBLE is None, reason="ansible-playbook is not installed (Debian package `ansible-core`)")


def playbook(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
               ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_PYTHON_INTERPRETER="auto_silent")
    return subprocess.run([ANSIBLE, "-i", "localhost,", "-c", "local", str(PLAYBOOK), *args],
                          capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp))


def recap(out: str) -> dict:
    m = re.search(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out)
    assert m, out
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups())))


def test_syntax_check(tmp_path):
    r = playbook("--syntax-check", tmp=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)  # three playbook runs, the first a whole venv install by pip
def test_rollout_to_localhost_into_a_temp_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    common = ["-e", "npu_watchdog_hosts=localhost", "-e", "npu_watchdog_become=false",
              "-e", f"npu_watchdog_root={root}", "-e", "npu_watchdog_job_name=job-a",
              "-e", "npu_watchdog_node_name=node-a"]
    r = playbook(*common, tmp=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert recap(r.stdout)["failed"] == 0

    etc = root / "etc" / "npu-watchdog"
    cfg = yaml.safe_load((etc / "config.yaml").read_text())
    assert cfg["node"]["name"] == "node-a" and cfg["job"]["name"] == "job-a"
    assert cfg["http"]["listen"] == "0.0.0.0:9841"
    assert oct((etc / "config.yaml").stat().st_mode & 0o777) == oct(0o600)
    exe = root / "opt" / "npu-watchdog" / "venv" / "bin" / "npu-watchdog"
    assert subprocess.run([str(exe), "--version"], capture_output=True, timeout=60).returncode == 0
    unit = (root / "etc" / "systemd" / "system" / "npu-watchdog.service").read_text()
    assert f"ExecStart={exe} run -c {etc}/config.yaml" in unit

    # A second run changes nothing.
    r = playbook(*common, tmp=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert recap(r.stdout)["changed"] == 0, r.stdout

    # An invalid per-node override is refused by check-config and the running config stays.
    before = (etc / "config.yaml").read_text()
    r = playbook(*common, "-e", '{"npu_watchdog_config_overrides": {"http": {"listen": "nonsense"}}}', tmp=tmp_path)
    assert r.returncode != 0
    assert "http.listen" in r.stdout, r.stdout
    assert (etc / "config.yaml").read_text() == before

"""The shipped unit passes `systemd-analyze verify` with no warnings at all."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO

UNIT = REPO / "systemd" / "npu-watchdog.service"


def test_unit_declares_notify_watchdog_and_reload():
    text = UNIT.read_text()
    for line in ("Type=notify", "Restart=on-failure", "StateDirectory=npu-watchdog",
                 "ExecReload=/bin/kill -HUP $MAINPID", "KillMode=mixed"):
        assert line in text, line
    assert re.search(r"^WatchdogSec=\d+", text, re.M)
    # PrivateDevices would hide /dev/davinci*; DeviceAllow takes no globs.
    assert not re.search(r"^PrivateDevices=", text, re.M)
    assert not re.search(r"^DeviceAllow=.*\*", text, re.M)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify(tmp_path):
    exe = shutil.which("npu-watchdog") or str(REPO / ".venv" / "bin" / "npu-watchdog")
    if not (REPO / ".venv" / "bin" / "npu-watchdog").exists() and not shutil.which("npu-watchdog"):
        exe = sys.executable
    text = UNIT.read_text()
    text = re.sub(r"^ExecStart=\S+", f"ExecStart={exe}", text, flags=re.M)
    unit = tmp_path / "npu-watchdog.service"
    unit.write_text(text)
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    # Only warnings about this unit count (the host's own units may have unrelated complaints).
    ours = [l for l in (res.stdout + res.stderr).splitlines() if "npu-watchdog" in l]
    assert res.returncode == 0 and not ours, res.stdout + res.stderr


#: The capabilities the unit keeps (docs/install.md, "Privileges", says which probe needs which).
UNIT_CAPS = ("CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_SYSLOG")


def test_the_unit_runs_with_least_privilege():
    text = UNIT.read_text()
    (caps,) = re.findall(r"^CapabilityBoundingSet=(.*)$", text, re.M)
    assert tuple(caps.split()) == UNIT_CAPS
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "SystemCallErrorNumber=EPERM", "PrivateTmp=yes"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line
    assert re.search(r"^SystemCallFilter=@system-service ptrace$", text, re.M)
    # the daemon logs to the journal: no log directory made and left unused
    assert not re.search(r"^LogsDirectory", text, re.M)
    # the unit's capability list and the docs' table say the same
    doc = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    for cap in UNIT_CAPS:
        assert f"`{cap}`" in doc, cap


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (Debian package systemd)")
def test_systemd_analyze_security_scores_below_4(tmp_path):
    unit = tmp_path / "npu-watchdog.service"
    unit.write_text(re.sub(r"^ExecStart=\S+", f"ExecStart={sys.executable}", UNIT.read_text(), flags=re.M))
    res = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r"Overall exposure level for npu-watchdog\.service: (\d+\.\d+)", res.stdout + res.stderr)
    assert found, res.stdout + res.stderr
    assert float(found.group(1)) < 4.0, res.stdout

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
    for line in ("Type=notify", "Restart=on-failure", "StateDirectory=npu-watchdog", "LogsDirectory=npu-watchdog",
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

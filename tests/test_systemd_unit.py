"""The shipped systemd unit passes `systemd-analyze verify` without a single warning.

`verify` exits 0 on unknown keys and only warns on stderr, so any stderr output fails the test.
ExecStart must name an existing executable (verify checks it), so a temporary copy points it at
this interpreter; everything else is verified exactly as shipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

UNIT = REPO / "systemd" / "npu-watchdog.service"

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                reason="systemd-analyze is not installed (Debian package `systemd`)")


def verify(unit: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                          capture_output=True, text=True, timeout=60)


def with_exec_start(text: str, exec_start: str) -> str:
    new, n = re.subn(r"(?m)^ExecStart=.*$", lambda _m: f"ExecStart={exec_start}", text)
    assert n == 1, "the unit must have exactly one ExecStart="
    return new


def test_shipped_unit_verifies_cleanly(tmp_path):
    unit = tmp_path / "npu-watchdog.service"
    unit.write_text(with_exec_start(UNIT.read_text(), f"{sys.executable} -m watchdog run -c /etc/npu-watchdog/config.yaml"))
    r = verify(unit)
    assert r.returncode == 0 and not r.stderr.strip(), f"rc={r.returncode}\n{r.stderr}"


def test_verify_catches_a_broken_unit(tmp_path):
    """The check above can fail: a misspelled key only warns (rc 0), and that warning is caught."""
    unit = tmp_path / "npu-watchdog.service"
    text = with_exec_start(UNIT.read_text(), f"{sys.executable} -m watchdog run")
    unit.write_text(text.replace("KillMode=mixed", "KillMod=mixed"))
    r = verify(unit)
    assert "KillMod" in r.stderr, r.stderr

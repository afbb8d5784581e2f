"""Start-up and configuration as a hostile or unlucky node treats them: each test runs the real
CLI or daemon as a subprocess against real files, ports, sockets and filesystems.

- a secret written with a YAML type other than a string (an unquoted numeric API key) is never
  echoed by `check-config` or `run`;
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

HANG_BOUND = 60.0


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "watchdog", *argv], capture_output=True, text=True,
                          cwd=str(REPO), timeout=HANG_BOUND)


@pytest.mark.parametrize("written, echoed", [
    ("918273645501234", "918273645501234"),  # an int
    ("9182736455.01234", "9182736455.01234"),  # a float
    ("0x5eedf00dcafe", str(0x5EEDF00DCAFE)),  # a YAML 1.1 hex int, echoed as its decimal value
])
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_an_unquoted_numeric_header_secret_is_never_echoed(tmp_path, command, written, echoed) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("paths:\n  state_dir: %s\nalerting:\n  channels:\n    - name: hook\n      type: webhook\n"
                   "      url: http://127.0.0.1:9/hook\n      headers:\n        X-Api-Key: %s\n"
                   % (tmp_path / "state", written))
    out = cli(command, "-c", str(cfg))
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    assert "alerting.channels[0].headers.X-Api-Key" in out.stderr, out.stderr
    assert "quote the secret" in out.stderr, out.stderr
    for text in (out.stdout, out.stderr):
        assert echoed not in text and written not in text, text
        assert echoed[:8] not in text, text

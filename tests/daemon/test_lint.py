"""pyflakes over the whole tree: no unused imports, undefined names or dead locals."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO


def test_pyflakes_clean():
    pytest.importorskip("pyflakes", reason="pyflakes is in the dev extra")
    res = subprocess.run([sys.executable, "-m", "pyflakes", "watchdog", "tests", "contrib", "bench"],
                         cwd=str(REPO), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr

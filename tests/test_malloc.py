"""The daemon limits glibc's malloc arenas (watchdog.malloc), unless the operator set it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="mallopt(M_ARENA_MAX) is glibc's")


def limited(env):
    code = "from watchdog.malloc import limit_arenas; print(limit_arenas())"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), env=env,
                         timeout=60)
    return res.stdout.strip()


def test_glibc_takes_the_arena_limit():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert limited(env) == "True"


def test_an_operator_setting_wins():
    assert limited(dict(os.environ, MALLOC_ARENA_MAX="8")) == "False"

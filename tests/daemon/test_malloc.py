"""The daemon limits glibc's malloc arenas (watchdog.service.malloc), unless the operator set it, and hands
freed heap pages back."""

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
    code = "from watchdog.service.malloc import limit_arenas; print(limit_arenas())"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), env=env,
                         timeout=60)
    return res.stdout.strip()


def test_glibc_takes_the_arena_limit():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert limited(env) == "True"


def test_an_operator_setting_wins():
    assert limited(dict(os.environ, MALLOC_ARENA_MAX="8")) == "False"


def test_trim_gives_freed_heap_pages_back():
    """Measured on a real process: memory freed by many small allocations stays resident until
    `trim` hands it back."""
    code = (
        "import gc\n"
        "from watchdog.service.malloc import trim\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
        "junk = [bytearray(2000) for _ in range(20000)]\n"  # ~40 MB through malloc (not obmalloc)
        "keep = junk[::50]\n"  # blocks left between the freed ones: free() alone gives nothing back
        "del junk; gc.collect()\n"
        "before = rss(); ok = trim(); after = rss()\n"
        "print(ok, before - after)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), timeout=60)
    ok, freed_kb = res.stdout.split()
    assert ok == "True" and int(freed_kb) > 10_000, res.stdout + res.stderr

"""APScheduler is imported without asyncio, ssl and multiprocessing (watchdog/scheduling/aps.py),
and the stand-ins never outlive that import: each case runs in a fresh interpreter, since this
one (pytest and its plugins) may have loaded those modules already."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: On 3.8 pydantic-core's typing_extensions imports asyncio (the run path then loads it without ssl).
FROM_39 = pytest.mark.skipif(sys.version_info < (3, 9), reason="3.8's pydantic-core imports asyncio itself")


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@FROM_39
def test_the_daemon_loads_neither_asyncio_nor_ssl_nor_multiprocessing():
    out = _run("""
        import sys
        import watchdog.daemon
        print(sorted(m for m in ("asyncio", "ssl", "multiprocessing", "concurrent.futures.process")
                     if m in sys.modules))
    """)
    assert out == "[]"


@FROM_39
def test_the_run_path_loads_none_of_them_either():
    """`run` first loads hashlib and pydantic's core without OpenSSL (watchdog.compat); from 3.9
    on nothing then imports asyncio (on 3.8 pydantic-core's typing_extensions does, without ssl)."""
    out = _run("""
        import sys
        from watchdog.compat import load_without_openssl
        load_without_openssl()
        import watchdog.plugins_list, watchdog.daemon
        print(sorted(m for m in ("asyncio", "ssl", "multiprocessing", "_hashlib") if m in sys.modules))
    """)
    assert out == "[]"


def test_a_later_import_gets_the_real_modules_and_the_scheduler_runs_jobs():
    out = _run("""
        import threading
        from watchdog.scheduling.aps import BackgroundScheduler, DebugExecutor
        import asyncio, multiprocessing, concurrent.futures.process as cfp
        assert asyncio.new_event_loop and multiprocessing.get_context and cfp.ProcessPoolExecutor
        ran = threading.Event()
        sched = BackgroundScheduler(executors={"default": DebugExecutor()}, timezone="UTC")
        sched.add_job(ran.set, "interval", seconds=60, next_run_time=__import__("datetime").datetime.now(
            __import__("datetime").timezone.utc))
        sched.start()
        print(ran.wait(10))
        sched.shutdown(wait=False)
    """)
    assert out == "True"


def test_modules_already_imported_are_kept():
    out = _run("""
        import asyncio
        import apscheduler.util as util
        from watchdog.scheduling import aps
        print(util.iscoroutinefunction is asyncio.iscoroutinefunction, aps.BackgroundScheduler.__name__)
    """)
    assert out == "True BackgroundScheduler"


def test_the_stand_ins_are_taken_out_when_the_import_fails():
    out = _run("""
        import sys
        from watchdog.scheduling.aps import without_heavy_imports
        try:
            with without_heavy_imports():
                assert sys.modules["asyncio"].__doc__.startswith("stand-in")
                raise ImportError("planted")
        except ImportError:
            pass
        print(sorted(m for m in ("asyncio", "multiprocessing", "concurrent.futures.process") if m in sys.modules))
    """)
    assert out == "[]"

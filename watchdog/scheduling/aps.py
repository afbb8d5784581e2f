"""APScheduler's classes the daemon uses, imported without asyncio, ssl and multiprocessing.

Why: APScheduler 3.x imports asyncio (for `iscoroutinefunction` alone; asyncio in turn imports
ssl) and multiprocessing (for its process-pool executor) whichever executor a scheduler uses. The
daemon uses neither: its jobs are plain functions that its in-thread executor runs. Those imports
were 2.8 MB of `import watchdog.daemon` (49.3 MB with them, 46.5 MB without) and 2.5 MB of an
idle daemon's resident memory (docs/benchmarks.md, "Idle footprint, 2026-12-07 15:35 and 15:40
UTC").

While APScheduler's modules are imported for the first time, small stand-ins take the place of
`asyncio`, `multiprocessing` and `concurrent.futures.process` in `sys.modules`, holding just the
names APScheduler binds at import (`iscoroutinefunction`, `BrokenProcessPool`); they are taken
out right after, so a later `import asyncio` anywhere gets the real module. A module already
imported is never replaced (a test runner that loaded asyncio keeps it, and APScheduler uses it).
Nothing in APScheduler's code paths that the daemon reaches calls into those modules: the
asyncio scheduler and executor are separate modules the daemon never loads, and APScheduler's
process-pool executor, which keeps the stand-in `multiprocessing`, cannot be built (the daemon
never builds it). The stand-ins are visible to every thread while they are in place, so this
module is imported before the daemon starts any thread (the entry points import the scheduler
first).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import sys
import types
from typing import Dict, Iterator


class BrokenProcessPool(concurrent.futures.BrokenExecutor):
    """The stand-in's exception (the process pool is never built, so it is never raised)."""


def _stand_ins() -> Dict[str, types.ModuleType]:
    light_asyncio = types.ModuleType("asyncio", "stand-in while APScheduler is imported")
    light_asyncio.iscoroutinefunction = inspect.iscoroutinefunction  # type: ignore[attr-defined]
    process = types.ModuleType("concurrent.futures.process", "stand-in while APScheduler is imported")
    process.BrokenProcessPool = BrokenProcessPool  # type: ignore[attr-defined]
    return {"asyncio": light_asyncio, "multiprocessing": types.ModuleType("multiprocessing"),
            "concurrent.futures.process": process}


@contextlib.contextmanager
def without_heavy_imports() -> Iterator[None]:
    """Stand-ins for the modules not yet imported, removed on the way out (see the module's text)."""
    placed = {name: mod for name, mod in _stand_ins().items() if name not in sys.modules}
    sys.modules.update(placed)
    try:
        yield
    finally:
        for name, mod in placed.items():
            if sys.modules.get(name) is mod:
                del sys.modules[name]


with without_heavy_imports():
    from apscheduler.executors.debug import DebugExecutor
    from apscheduler.jobstores.base import JobLookupError
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.interval import IntervalTrigger

__all__ = ["BackgroundScheduler", "DebugExecutor", "IntervalTrigger", "JobLookupError"]

"""The daemon's orderly stop: what winds down first, what is joined, what is killed last."""

from __future__ import annotations

import logging
from typing import Optional

from watchdog.host import subproc
from watchdog.http.server import HttpEndpoint
from watchdog.runtime import AlertEngineView, SnapshotService
from watchdog.scheduler import ProbeScheduler

log = logging.getLogger("watchdog.daemon")


def shut_down(scheduler: ProbeScheduler, http: Optional[HttpEndpoint], engine: AlertEngineView,
              snapshots: Optional[SnapshotService]) -> None:
    if snapshots is not None:
        snapshots.cancel()  # captures wind down while the rest stops (joined below)
    scheduler.shutdown()
    if http is not None:
        http.stop()
    try:
        engine.close()
    except Exception:
        log.exception("closing the alert engine failed")
    if snapshots is not None:
        try:
            snapshots.close()
        except Exception:
            log.exception("closing the snapshot taker failed")
    # Last: commands still running (an abandoned round, a capture's hung npu-smi) are in their
    # own sessions, so nothing else would end them.
    killed = subproc.kill_all()
    if killed:
        log.info("stopped %d running command(s) with their process groups", killed)
    log.info("stopped")

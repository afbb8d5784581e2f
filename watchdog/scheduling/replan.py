"""The probe schedules after a step of the wall clock.

Why: APScheduler plans on the wall clock. Stepped back an hour, it held every probe round and the
periodic detector pass for that hour (a rank that died just before was never judged); stepped
forward, it skips a round as missed. The daemon's main loop waits on the monotonic clock, so it
looks at every turn (`ClockFollower.follow`) and a step re-plans every job from the wall clock of
now (`replan_jobs`).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from watchdog.host.clock import CLOCK
from watchdog.scheduling.aps import JobLookupError

log = logging.getLogger("watchdog.scheduler")

#: The main loop turns this long after a grid point, once the rounds started there are handed over.
BEAT_AFTER = 0.05


def until_beat(anchor: datetime, period: float) -> float:
    """Seconds from now until just after the next multiple of `period` from `anchor` (the probes'
    grid), so that the main loop turns in the wake-up of the rounds and the tick, not in one of its
    own (docs/architecture.md, "Threads and wake-ups")."""
    since = (datetime.now(timezone.utc) - anchor).total_seconds()
    return period - since % period + BEAT_AFTER


def replan_jobs(sched: Any, intervals: Mapping[str, float], trigger: Callable[[float], Any],
                others: Mapping[str, Any]) -> None:
    """Give each probe job (`intervals`: job id -> seconds) a new trigger from `trigger`, and
    each of `others` (job id -> trigger) its own again; then wake the scheduler."""
    for name, interval in intervals.items():
        sched.reschedule_job(name, trigger=trigger(interval))
    for name, trig in others.items():
        sched.reschedule_job(name, trigger=trig)
    sched.wakeup()
    log.info("probe schedules planned again after the wall-clock step")


def move_job(sched: Any, lock: threading.Lock, job_id: str, trigger: Callable[[], Any],
             anchor: Callable[[], Any]) -> None:
    """Give `job_id` the trigger `trigger()` makes now (the last wanted one wins, whichever
    thread runs last). Run in a thread of its own: APScheduler holds its job store's lock while a
    job runs in its in-thread executor; and never from that job (the executor writes the job's
    next run after it returns, over a new trigger). A wall-clock step's re-plan (a new `anchor()`)
    while this waited for that lock is not undone: the trigger is made again on the new anchor."""
    with lock:
        for _ in range(3):
            made_on = anchor()
            try:
                sched.reschedule_job(job_id, trigger=trigger())
            except JobLookupError:  # stopped meanwhile
                return
            if anchor() == made_on:
                return


class ClockFollower:
    """Calls `replan` once for each wall-clock step (said once, by whoever looks first)."""

    def __init__(self, replan: Callable[[], None]):
        self.replan = replan
        self.seen = CLOCK.steps_total

    def follow(self) -> None:
        CLOCK.check()
        if CLOCK.steps_total == self.seen:
            return
        self.seen = CLOCK.steps_total
        try:
            self.replan()
        except Exception:  # the next step tries again; rounds run late meanwhile, not never
            log.exception("planning the probe schedules again after a clock step failed")

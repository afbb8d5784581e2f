"""How often the scheduler's threads wake: rounds settle in their own worker, the watch thread
wakes for deadlines only, and a probe with nothing to watch runs rarely (docs/architecture.md,
"Threads and wake-ups"). Wake-ups are counted by the kernel (voluntary context switches of one
thread of this process), not timed."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import List

from tests.helpers import wait_for
from watchdog.scheduling import pace as pace_mod
from watchdog.core.state import StateStore
from watchdog.probes.base import Collected, Probe, ProbeError
from watchdog.scheduler import ProbeScheduler


class Counting(Probe):
    def __init__(self, name: str, interval: float = 0.2):
        self.name, self.interval, self.timeout, self.n = name, interval, 1.0, 0

    def collect(self) -> Collected:
        self.n += 1
        return Collected(self.n, f"round {self.n}")


class ToolLater(Counting):
    """Finds nothing to watch until `tool` is set (as the links probe without hccn_tool)."""

    def __init__(self, name: str, interval: float):
        super().__init__(name, interval)
        self.tool = threading.Event()

    def collect(self) -> Collected:
        self.n += 1
        if not self.tool.is_set():
            return Collected(None, "tool not found", quiet=True, idle=True)
        return Collected(self.n, "watching")


def woken(thread: threading.Thread) -> int:
    """Voluntary context switches of `thread` so far: each is one sleep it was woken from."""
    with open(f"/proc/self/task/{thread.native_id}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("voluntary_ctxt_switches"))


def test_rounds_that_end_in_time_are_settled_in_their_own_thread_and_the_watch_sleeps():
    threads: List[str] = []
    sched = ProbeScheduler(StateStore(), 5.0, 0.0, tick=lambda: None,
                           on_round=lambda batch: threads.append(threading.current_thread().name))
    probes = [Counting(f"p{i}") for i in range(3)]
    sched.start(probes)
    try:
        wait_for(lambda: len(threads) >= 2, what="first batches")
        before, batches = woken(sched._watch.thread), len(threads)
        wait_for(lambda: len(threads) >= batches + 15, timeout=30, what="15 more batches")
        wakeups, batches = woken(sched._watch.thread) - before, len(threads) - batches
    finally:
        sched.shutdown()
    assert set(threads) <= {"probe-p0", "probe-p1", "probe-p2"}, threads
    # Settling in the watch thread woke it for every round handed over and every round ended
    # (3 probes: about 6 a batch). Now it wakes for deadlines: at most about once a batch.
    assert wakeups <= 1.5 * batches, (wakeups, batches)


def test_a_probe_with_nothing_to_watch_runs_every_idle_seconds_until_it_has(monkeypatch):
    monkeypatch.setattr(pace_mod, "IDLE_SECONDS", 1.0)
    store = StateStore()
    sched = ProbeScheduler(store, 5.0, 0.0, on_round=lambda batch: None, tick=lambda: None)
    links, other = ToolLater("links", 0.1), Counting("other", 0.1)
    sched.start([links, other])
    try:
        wait_for(lambda: store.status("links").interval == 1.0, what="links moved to the idle interval")
        n, m = links.n, other.n
        wait_for(lambda: other.n >= m + 20, timeout=30, what="20 rounds of a probe at 0.1 s")
        # 20 rounds of the other probe take 2 s or more: an idle probe at 1 s ran 2-3 times in them.
        assert links.n - n <= (other.n - m) // 5, (links.n - n, other.n - m)
        assert sched.completing_rounds()
        links.tool.set()  # the next round (within a second) finds the tool: back to 0.1 s
        wait_for(lambda: store.status("links").interval == 0.1, what="links back at its own interval")
        n = links.n
        wait_for(lambda: links.n >= n + 10, timeout=30, what="10 rounds at 0.1 s")
        assert store.status("links").up
    finally:
        sched.shutdown()


def test_the_tick_moves_to_the_period_it_is_given_on_the_grid():
    ticks: List[float] = []
    sched = ProbeScheduler(StateStore(), 5.0, 0.0, on_round=lambda batch: None, tick=lambda: ticks.append(1.0))
    sched.start([Counting("other", 0.1)])
    try:
        sched.tick_every(0.1)
        wait_for(lambda: len(ticks) >= 10, timeout=30, what="ticks at 0.1 s")
        sched.tick_every(2.0)
        n, rounds, since = len(ticks), sched.probes["other"].n, time.monotonic()
        wait_for(lambda: sched.probes["other"].n >= rounds + 20, timeout=30, what="20 rounds at 0.1 s")
        # At 0.1 s it would have ticked as often as the probe ran (20 times or more).
        assert len(ticks) - n <= (time.monotonic() - since) / 2.0 + 2, (len(ticks) - n)
        assert sched.tick_period == 2.0 and sched.completing_rounds()
    finally:
        sched.shutdown()


def test_moving_the_tick_never_waits_for_a_tick_stuck_in_io():
    """The main loop moves the tick; APScheduler holds its job store's lock while the tick runs, so
    a tick's pass stuck in I/O must not hold the main loop (it would miss a stop signal)."""
    stuck, ticks = threading.Event(), []

    def tick() -> None:
        ticks.append(1)
        stuck.wait(30)

    sched = ProbeScheduler(StateStore(), 5.0, 0.0, on_round=lambda batch: None, tick=tick)
    sched.start([])
    mover = None
    try:
        sched.tick_every(0.1)
        wait_for(lambda: ticks, timeout=30, what="a tick, stuck")
        mover = threading.Thread(target=sched.tick_every, args=(1.0,), daemon=True)
        mover.start()
        mover.join(5.0)
        assert not mover.is_alive(), "tick_every waited for the stuck tick"
        assert sched.tick_period == 1.0
    finally:
        stuck.set()
        sched.shutdown()


class ToolFails(ToolLater):
    """Idle until `tool` is set; then every round fails (the tool is there, the driver is not)."""

    def collect(self) -> Collected:
        if self.tool.is_set():
            self.n += 1
            raise ProbeError("every hccn_tool query of this round failed")
        return super().collect()


def test_an_idle_probe_whose_rounds_fail_runs_at_its_own_interval_again(monkeypatch):
    monkeypatch.setattr(pace_mod, "IDLE_SECONDS", 1.0)
    store = StateStore()
    sched = ProbeScheduler(store, 5.0, 0.0, on_round=lambda batch: None, tick=lambda: None)
    links = ToolFails("links", 0.1)
    sched.start([links])
    try:
        wait_for(lambda: store.status("links").interval == 1.0, what="links at the idle interval")
        links.tool.set()
        wait_for(lambda: store.status("links").interval == 0.1, what="a failing round brings its own interval back")
        n = links.n
        wait_for(lambda: links.n >= n + 10, timeout=30, what="10 failing rounds at 0.1 s")
        assert not store.status("links").up
    finally:
        sched.shutdown()


def test_a_tick_move_that_waited_out_a_clock_steps_replan_is_made_on_the_new_anchor():
    """The mover makes its trigger, then waits for APScheduler's lock (a tick stuck in I/O); a
    wall-clock step's re-plan meanwhile moves the anchor. Found by an attack pass: the mover then
    wrote the old anchor's trigger, and after a step back of an hour the tick stopped for an hour."""
    sched = ProbeScheduler(StateStore(), 5.0, 0.0, on_round=lambda batch: None, tick=lambda: None)
    sched.start([])
    real = sched._sched.reschedule_job
    stepped = threading.Event()

    def replan_meanwhile(job_id, **kwargs):
        out = real(job_id, **kwargs)
        if threading.current_thread().name == "tick-move" and not stepped.is_set():
            stepped.set()
            sched._anchor -= timedelta(hours=1)  # what `replan` does after a step back of an hour
        return out

    sched._sched.reschedule_job = replan_meanwhile
    try:
        sched.tick_every(2.0)
        wait_for(stepped.is_set, timeout=30, what="the mover's first reschedule")
        wait_for(lambda: not [t for t in threading.enumerate() if t.name == "tick-move"], timeout=30,
                 what="the mover done")
        job = sched._sched.get_job("_tick")
        assert job.trigger.start_date == sched._anchor + timedelta(seconds=2.0), (job.trigger.start_date, sched._anchor)
    finally:
        sched.shutdown()

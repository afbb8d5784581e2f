"""Runs each probe on its own interval, with a hard per-round timeout, and records its health.

APScheduler has no job timeout and its pool threads block interpreter exit, so a round's real
work runs in its probe's own daemon thread (`RoundWorker`), and the job only hands the round over
and returns: APScheduler's pool needs one thread. A round is settled when it finishes (in its
worker) or when the probe's timeout is up (`RoundWatch`), whichever comes first. A round that
overruns marks the probe down and is left to finish (or hang) on its own; while it is still stuck,
later rounds report "previous round still running" instead of piling up threads. Subprocesses
inside probes have their own timeouts and kill their process group.

Every periodic wake-up of the daemon falls on one grid (the anchor + k x interval): the probes of
one interval, the tick, and the main loop's turn (`until_beat`) wake together. On a VM an idle
process pays a fixed share of a millisecond each time it wakes, whatever it then does, so wake-ups
that fall together cost one (docs/architecture.md, "Threads and wake-ups").
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

from watchdog.host import clock
from watchdog.probes.base import Probe
from watchdog.scheduling.aps import BackgroundScheduler, DebugExecutor, IntervalTrigger, JobLookupError
from watchdog.scheduling.pace import IdlePacing
from watchdog.scheduling.batch import gather
from watchdog.scheduling.replan import ClockFollower, move_job, replan_jobs, until_beat
from watchdog.scheduling.rounds import Round, RoundWorker, pass_wanted, record_round, record_stuck
from watchdog.scheduling.tracker import RoundTracker
from watchdog.scheduling.watch import RoundWatch
from watchdog.core.state import StateStore

log = logging.getLogger(__name__)

TICK_JOB = "_tick"
#: Period of the scheduler's own tick (periodic evaluation, liveness of the scheduler loop). One
#: APScheduler run costs a few ms of CPU on a small VM, so a 1 s tick alone was ~0.25 % of a core
#: at idle (bench/bench_footprint.py); time-based detectors only need an evaluation every few seconds.
TICK_SECONDS = 5.0
#: The tick's period while nothing is found and every detector's answer is fresh (the daemon says
#: so, `tick_every`): the rounds' own passes then judge the node every 10 s at the shipped
#: intervals and the 5 s tick's passes were all skipped, so the wake-ups between two rounds did
#: nothing (docs/architecture.md, "When detectors run").
IDLE_TICK_SECONDS = 10.0
#: A probe with change events (`wait_change`, the logs probe) runs a round when they arrive, at
#: most this often: a new failure line is read within a fraction of a second, while a chatty log
#: cannot make rounds back to back.
EVENT_GAP = 0.25
#: The gap doubles after each event round that found nothing, up to this (`next_gap`): a log
#: written all the time (a progress bar refreshing 10 times a second) made four rounds a second,
#: each finding nothing. A write after a pause longer than the gap is still read at once; a
#: failure line amid a chatty log within this long.
MAX_EVENT_GAP = 2.0
#: How long a follower thread waits for events before checking that its probe is still current
#: (a probe replaced by a reload leaves its old follower asleep this long at most; the follower
#: of its successor runs meanwhile). Each timeout is a wake-up off the grid: at 5 s the two
#: followers were an eighth of an idle daemon's wake-ups.
FOLLOW_WAIT = 60.0
#: How long a follower waits after its probe's `wait_change` failed before it waits again.
FOLLOW_ERROR_WAIT = 5.0
#: How long a stop waits for APScheduler's thread to finish the job it is running (a detector pass
#: takes milliseconds). A pass stuck longer (a state write on a hung disk) is left behind: the stop
#: goes on to close the probes, which saves their progress, within systemd's TimeoutStopSec (20 s).
STOP_WAIT = 5.0


def stop_bounded(sched: BackgroundScheduler) -> None:
    """APScheduler's `shutdown` joins its thread with no bound, and that thread runs the periodic
    detector pass itself: one pass stuck in I/O would hold the whole stop until systemd kills the
    daemon, before the probes save their progress. The call runs in a thread of its own and is
    waited for STOP_WAIT seconds."""
    def stop() -> None:
        try:
            sched.shutdown(wait=False)
        except Exception:  # already stopped
            pass

    stopper = threading.Thread(target=stop, name="scheduler-stop", daemon=True)
    stopper.start()
    stopper.join(STOP_WAIT)
    if stopper.is_alive():
        log.warning("the scheduler's thread is still running a job after %.0f s (a detector pass "
                    "stuck in I/O?); stopping without it", STOP_WAIT)


class ProbeScheduler:
    """Owns the APScheduler instance and the probes' round bookkeeping."""

    def __init__(self, store: StateStore, default_timeout: float, jitter: float,
                 on_round: Callable[[FrozenSet[str]], None], tick: Callable[[], None],
                 on_complete_round: Optional[Callable[[], None]] = None,
                 on_first_round: Optional[Callable[[], None]] = None):
        self.store = store
        self.default_timeout = default_timeout
        self.jitter = jitter
        #: Called after rounds with the probes whose rounds finished (a batch at once, see `_finish`).
        self.on_round = on_round
        #: Probes whose finished rounds wait for the rest of their batch.
        self._gathered: set = set()
        #: Every schedule is shifted by one random offset (0..jitter) drawn at start, not per run:
        #: a fleet still does not probe in lock-step, while this daemon's probes of one interval
        #: run together (one wake-up, one detector pass for their batch, warm caches).
        self._phase = timedelta(seconds=random.uniform(0.0, jitter or 0.0))
        self._anchor = datetime.now(timezone.utc) + self._phase
        self.clock_follower = ClockFollower(self.replan)  # a wall-clock step re-plans (main loop)
        #: First rounds (READY=1), full rounds (the dead-man ping), rounds completing on time.
        self.rounds = RoundTracker(on_complete_round, on_first_round)
        self._tick_fn = tick
        self.probes: Dict[str, Probe] = {}
        self._inflight: Dict[str, Round] = {}
        #: When each probe's latest round started (monotonic), for batching (`_gather`).
        self._started: Dict[str, float] = {}
        self._lock = threading.Lock()
        #: One round of a probe at a time, whether the schedule or its change events started it.
        self._turns: Dict[str, threading.Lock] = {}
        self._workers: Dict[str, RoundWorker] = {}
        #: Probes at the idle interval for now (pace.py); settles rounds that overrun (watch.py).
        self._pacing, self._watch = IdlePacing(), RoundWatch()
        self._stopped = threading.Event()
        self.last_tick = time.monotonic()
        #: The tick's period now: TICK_SECONDS, or IDLE_TICK_SECONDS at idle (`tick_every`).
        self.tick_period, self._tick_moving = TICK_SECONDS, threading.Lock()
        self._sched = BackgroundScheduler(
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": 30},
            # A job only hands a round to its probe's worker and returns, and the tick runs the
            # periodic detector pass (milliseconds): APScheduler's in-thread executor runs them in
            # its own thread, so no pool thread waits beside it for work that short.
            executors={"default": DebugExecutor()},
            timezone="UTC",
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, probes: List[Probe]) -> None:
        self._sched.add_job(self._tick, self._trigger(TICK_SECONDS), id=TICK_JOB, name=TICK_JOB)
        for p in probes:
            self._add(p)
        self._sched.start()

    def shutdown(self) -> None:
        self._stopped.set()
        with self._lock:
            for worker in self._workers.values():
                worker.submit(None)
        self._watch.stop()
        stop_bounded(self._sched)
        for p in list(self.probes.values()):
            try:
                p.close()
            except Exception:
                log.exception("closing probe %s failed", p.name)

    def until_beat(self, period: float) -> float:
        """Seconds until just after the next multiple of `period` on the grid (the main loop's turn)."""
        return until_beat(self._anchor, period)

    def timeout_of(self, probe: Probe) -> float:
        return probe.timeout if probe.timeout else self.default_timeout

    def _add(self, probe: Probe) -> None:
        self.probes[probe.name] = probe
        self.rounds.register(probe.name)
        self.store.register(probe.name, probe.interval)
        # APScheduler's own interval trigger on the daemon's grid (see `_trigger`): it counts each
        # next run from the last one, so the first round runs here, at once, outside the schedule
        # (a run at once inside it would move the grid to the start's instant).
        self._sched.add_job(
            self._run_probe, self._trigger(probe.interval),
            args=[probe.name], id=probe.name, name=probe.name, replace_existing=True,
        )
        self._run_probe(probe.name)
        if probe.follows_changes:
            threading.Thread(target=follow_changes, args=(self, probe), name=f"follow-{probe.name}", daemon=True).start()

    def _trigger(self, interval: float) -> IntervalTrigger:
        """The grid anchor + k * interval, from k = 1: the round at k = 0 is the one run at once."""
        return IntervalTrigger(seconds=interval, start_date=self._anchor + timedelta(seconds=interval),
                               timezone=timezone.utc)

    def replace_probes(self, probes: List[Probe], default_timeout: float, jitter: float) -> None:
        """Apply a reloaded config: keep probes that adopt the new settings, swap the rest."""
        self.default_timeout = default_timeout
        self.jitter = jitter
        new_names = {p.name for p in probes}
        for name in list(self.probes):
            if name not in new_names:
                self._sched.remove_job(name)
                self.probes.pop(name).close()
                with self._lock:
                    worker = self._workers.pop(name, None)
                self._pacing.forget(name)
                if worker is not None:
                    worker.submit(None)  # ends after a round still running, if any
        for p in probes:
            old = self.probes.get(p.name)
            self._pacing.forget(p.name)  # a new config: its own interval until a round says otherwise
            if old is not None and old.reconfigure(p):
                self._sched.reschedule_job(p.name, trigger=self._trigger(old.interval))
                self.store.register(p.name, old.interval)
                continue
            if old is not None:
                old.close()
            self._add(p)
        self.store.unregister_missing(list(self.probes))

    def replan(self) -> None:
        """After a step of the wall clock (see watchdog.scheduling.replan): every schedule is
        anchored again at the wall clock of now, with the same phase."""
        self._anchor = datetime.now(timezone.utc) + self._phase
        replan_jobs(self._sched, {n: self.interval_of(n) for n in self.probes}, self._trigger,
                    {TICK_JOB: self._trigger(self.tick_period)})

    def tick_every(self, seconds: float) -> None:
        """Move the tick to `seconds` on the grid, in a thread of its own (`replan.move_job`: a tick
        stuck in I/O holds APScheduler's lock; the main loop, which calls this, must not wait)."""
        if seconds != self.tick_period:
            self.tick_period = seconds
            threading.Thread(target=move_job, args=(self._sched, self._tick_moving, TICK_JOB,
                                                    lambda: self._trigger(self.tick_period), lambda: self._anchor),
                             name="tick-move", daemon=True).start()

    # -- rounds ----------------------------------------------------------------------------
    def _tick(self) -> None:
        self.last_tick = time.monotonic()
        try:
            self._tick_fn()
        except Exception:
            log.exception("periodic evaluation failed")

    def run_now(self, name: str) -> None:  # returns once the round is settled (recorded, evaluated)
        self._run_probe(name, wait_settled=True)

    def _run_probe(self, name: str, wait_turn: bool = False, wait_settled: bool = False) -> Optional[Round]:
        """Start one round and return it (None: none started): a scheduled one is skipped while another
        is under way, one for change events waits for its turn; the turn returns at `_settle`."""
        probe = self.probes.get(name)
        if probe is None:
            return None
        with self._lock:
            turn = self._turns.setdefault(name, threading.Lock())
        if not (turn.acquire(timeout=self.timeout_of(probe) + 1.0) if wait_turn else turn.acquire(blocking=False)):
            return None
        try:
            rnd = self._start_round(name, probe, turn)
        except BaseException:  # never keep the turn of a round that did not start
            turn.release()
            raise
        if rnd is None:
            turn.release()
        elif wait_settled:
            rnd.settled.wait()
        return rnd

    def _start_round(self, name: str, probe: Probe, turn: threading.Lock) -> Optional[Round]:
        """Hand a round to the probe's worker, watched until settled; None: the last one is stuck."""
        timeout = self.timeout_of(probe)
        now = clock.now()
        st = self.store.status(name)
        runs = (st.runs_total if st else 0) + 1
        with self._lock:
            stuck = self._inflight.get(name)
        if stuck is not None and not stuck.done.is_set():
            record_stuck(self.store, name, stuck, runs, now)
            self._finish(name, complete=False)
            return None
        rnd = Round(probe)
        with self._lock:
            self._inflight[name] = rnd
            self._started[name] = rnd.started
            worker = self._workers.get(name)
            if worker is None:
                worker = self._workers[name] = RoundWorker(name)
        self._watch.watch(rnd, timeout, lambda finished: self._settle(name, rnd, finished, (timeout, runs, now), turn))
        worker.submit(rnd)
        return rnd

    def _settle(self, name: str, rnd: Round, finished: bool, when: Tuple[float, int, float],
                turn: threading.Lock) -> None:
        """Record a finished (or timed-out) round, hand its batch to the detector pass, give the
        probe's turn back: in the watch's thread, once per round."""
        timeout, runs, now = when
        try:
            if finished:
                with self._lock:
                    self._inflight.pop(name, None)
            record_round(self.store, name, rnd, finished, timeout, runs, now)
            self._pace(name, rnd, finished)
            evaluate, wait = pass_wanted(rnd, finished)
            self._finish(name, complete=finished, evaluate=evaluate, wait=wait)
        finally:
            turn.release()

    def interval_of(self, name: str) -> float:
        """The probe's interval now: its own, or IDLE_SECONDS while it has nothing to watch."""
        return self._pacing.interval(name, self.probes[name].interval)

    def _pace(self, name: str, rnd: Round, finished: bool) -> None:
        """Reschedule a probe whose round moved it to the idle interval or back (scheduling/pace.py)."""
        every = self._pacing.settled(name, rnd, finished) if self.probes.get(name) is rnd.probe else None
        with contextlib.suppress(JobLookupError):  # JobLookupError: replaced by a reload meanwhile
            if every is not None:
                self._sched.reschedule_job(name, trigger=self._trigger(every))
                self.store.register(name, every)
                log.info("probe %s: rounds every %gs (%s)", name, every,
                         "nothing to watch on this node" if every != rnd.probe.interval else "its own interval")

    def _finish(self, name: str, complete: bool = True, evaluate: bool = True, wait: bool = True) -> None:
        self.rounds.ended(name)
        try:
            batch = self._gather(name, own=evaluate, wait=wait)
            if batch:
                self.on_round(batch)
        except Exception:
            log.exception("evaluation after probe %s failed", name)
        self.rounds.note_round(name, complete, self.probes)

    def _gather(self, name: str, own: bool = True, wait: bool = True) -> Optional[FrozenSet[str]]:
        """The probes to evaluate for now, or None (scheduling/batch.py)."""
        with self._lock:
            return gather(self._gathered, name, own, wait, self._started, self._inflight)

    # -- health ----------------------------------------------------------------------------
    def wait_first_round(self, timeout: float) -> bool:
        return self.rounds.wait_first_round(timeout)

    def completing_rounds(self) -> bool:
        """True if the scheduler loop ticks and every probe's rounds complete on time: gates the
        systemd watchdog ping (`RoundTracker.completing`)."""
        budgets = {n: self.interval_of(n) + self.timeout_of(p) + self.jitter + 30 for n, p in self.probes.items()}
        return self.rounds.completing(self.last_tick, budgets, time.monotonic())

    def next_runs(self) -> Dict[str, Optional[float]]:
        # A job added before the scheduler started is pending: it has no next_run_time yet (the
        # HTTP server answers /api/status from the first moment, before the scheduler starts).
        runs = {job.id: getattr(job, "next_run_time", None) for job in self._sched.get_jobs()}
        return {name: at.timestamp() if at else None for name, at in runs.items() if name != TICK_JOB}


def follow_changes(sched: ProbeScheduler, probe: Probe) -> None:
    """Run a round of `probe` whenever it reports a change (until it is replaced or the scheduler
    stops): the thread of a probe with change events (`follows_changes`), beside its schedule."""
    last, gap = 0.0, EVENT_GAP
    while not sched._stopped.is_set() and sched.probes.get(probe.name) is probe:
        # The gap is waited out before the changes are collected, not after: a change that comes
        # meanwhile (a NaN line in another rank's log than the chatty one) is in this round.
        wait = gap - (time.monotonic() - last)
        if wait > 0 and sched._stopped.wait(wait):
            return
        try:
            changed = probe.wait_change(FOLLOW_WAIT)
        except Exception:
            log.exception("waiting for changes of probe %s failed", probe.name)
            sched._stopped.wait(FOLLOW_ERROR_WAIT)
            continue
        if not changed or sched.probes.get(probe.name) is not probe:
            continue
        last = time.monotonic()
        gap = next_gap(gap, sched._run_probe(probe.name, wait_turn=True, wait_settled=True))


def next_gap(gap: float, rnd: Optional[Round]) -> float:
    """The least time from this event round's start to the next one's: doubled (up to
    MAX_EVENT_GAP) after a round that found nothing, EVENT_GAP after one that found something,
    failed or left a backlog (caught up at the speed of the reads, not once per gap), and always
    for a probe whose unread changes are lost (`Probe.spaces_quiet_rounds`: the kernel's ring)."""
    res = rnd.result if rnd is not None and rnd.error is None and rnd.probe.spaces_quiet_rounds else None
    return min(2 * gap, MAX_EVENT_GAP) if res is not None and res.quiet and not res.more else EVENT_GAP

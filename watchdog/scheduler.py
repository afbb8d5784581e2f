"""Runs each probe on its own interval, with a hard per-round timeout, and records its health.

APScheduler has no job timeout and its pool threads block interpreter exit, so a round's real
work runs in a separate daemon thread that the job waits on for at most the probe's timeout. A
round that overruns marks the probe down and is left to finish (or hang) on its own; while it is
still stuck, later rounds report "previous round still running" instead of piling up threads.
Subprocesses inside probes have their own timeouts and kill their process group.
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Dict, FrozenSet, List, Optional

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from watchdog.probes.base import Collected, Probe
from watchdog.core.state import StateStore

log = logging.getLogger(__name__)

TICK_JOB = "_tick"
#: Period of the scheduler's own tick (periodic evaluation, liveness of the scheduler loop). One
#: APScheduler run costs a few ms of CPU on a small VM, so a 1 s tick alone was ~0.25 % of a core
#: at idle (bench/bench_footprint.py); time-based detectors only need an evaluation every few seconds.
TICK_SECONDS = 5.0
#: A probe with change events (`wait_change`, the logs probe) runs a round when they arrive, at
#: most this often: a new failure line is read within a fraction of a second, while a chatty log
#: cannot make rounds back to back.
EVENT_GAP = 0.25
#: How long a follower thread waits for events before checking that its probe is still current.
FOLLOW_WAIT = 5.0
#: Rounds started this close together form one batch: the last of them to finish runs the
#: detector pass for all (see `ProbeScheduler._finish`).
BATCH_SECONDS = 0.5


class _PhasedTrigger(IntervalTrigger):
    """An interval trigger whose runs stay on its grid (start_date + k * interval) after a run
    off the grid. Why: a probe's first round runs at once (start, reload), and APScheduler's own
    trigger counts the next run from that one, which dropped the daemon's random offset (every
    node started together probed in lock-step). Always after the previous run, so APScheduler's
    catch-up loop ends."""

    def get_next_fire_time(self, previous_fire_time: Optional[datetime], now: datetime) -> Optional[datetime]:
        if previous_fire_time is None:
            return super().get_next_fire_time(previous_fire_time, now)
        base, length = self.start_date.timestamp(), self.interval_length
        # The grid's first run more than half an interval after the previous one: a run on the
        # grid is followed by the next one, a run off it (at once) by one 0.5 to 1.5 intervals on.
        after = previous_fire_time + timedelta(seconds=length / 2)
        steps = math.floor((after.timestamp() - base) / length) + 1
        nxt = datetime.fromtimestamp(base + steps * length, tz=self.timezone)
        while nxt <= after:  # rounding (floats, microseconds)
            steps += 1
            nxt = datetime.fromtimestamp(base + steps * length, tz=self.timezone)
        return nxt


class _Round:
    """One round of one probe, run by the probe's worker thread."""

    def __init__(self, probe: Probe):
        self.probe = probe
        self.started = time.monotonic()
        self.result: Optional[Collected] = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.result = self.probe.collect()
        except BaseException as exc:  # noqa: BLE001 - reported, never raised into the scheduler
            self.error = exc
        finally:
            self.done.set()


class _Worker:
    """The thread that runs one probe's rounds, one after the other (a thread per round cost a
    thread start per round). A round stuck in it is abandoned by the scheduler like before: the
    next rounds are refused ("previous round still running") until it returns."""

    def __init__(self, name: str):
        self._queue: "queue.SimpleQueue[Optional[_Round]]" = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=f"probe-{name}", daemon=True).start()

    def submit(self, rnd: Optional[_Round]) -> None:
        self._queue.put(rnd)

    def _loop(self) -> None:
        while True:
            rnd = self._queue.get()
            if rnd is None:
                return
            rnd.run()


def _short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if name in ("ProbeError",):
        return text[:500]
    return f"{name}: {text}"[:500] if text else name


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
        self._anchor = datetime.now(timezone.utc) + timedelta(seconds=random.uniform(0.0, jitter or 0.0))
        #: Called when every probe has finished a round (none timed out or hung) since the last call.
        self.on_complete_round = on_complete_round
        self._round_done: set = set()
        #: Called once, as soon as every probe has finished its first round (READY=1 follows).
        self.on_first_round = on_first_round
        self._first_round_fired = False
        self._tick_fn = tick
        self.probes: Dict[str, Probe] = {}
        self._inflight: Dict[str, _Round] = {}
        #: When each probe's latest round started (monotonic), for batching (`_gather`).
        self._started: Dict[str, float] = {}
        self._completed: Dict[str, float] = {}
        self._first_done: Dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        #: One round of a probe at a time, whether the schedule or its change events started it.
        self._turns: Dict[str, threading.Lock] = {}
        self._workers: Dict[str, _Worker] = {}
        self._stopped = threading.Event()
        self.last_tick = time.monotonic()
        self._sched = BackgroundScheduler(
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": 30},
            executors={"default": {"type": "threadpool", "max_workers": 20}},
            timezone="UTC",
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, probes: List[Probe]) -> None:
        self._sched.add_job(self._tick, IntervalTrigger(seconds=TICK_SECONDS), id=TICK_JOB, name=TICK_JOB)
        for p in probes:
            self._add(p)
        self._sched.start()

    def shutdown(self) -> None:
        self._stopped.set()
        with self._lock:
            for worker in self._workers.values():
                worker.submit(None)
        try:
            self._sched.shutdown(wait=False)
        except Exception:  # already stopped
            pass
        for p in list(self.probes.values()):
            try:
                p.close()
            except Exception:
                log.exception("closing probe %s failed", p.name)

    def timeout_of(self, probe: Probe) -> float:
        return probe.timeout if probe.timeout else self.default_timeout

    def _add(self, probe: Probe) -> None:
        self.probes[probe.name] = probe
        self._first_done.setdefault(probe.name, threading.Event())
        self.store.register(probe.name, probe.interval)
        self._sched.add_job(
            self._run_probe, self._trigger(probe.interval),
            args=[probe.name], id=probe.name, name=probe.name, replace_existing=True,
            next_run_time=datetime.now().astimezone(),
        )
        if callable(getattr(probe, "wait_change", None)):
            threading.Thread(target=self._follow, args=(probe,), name=f"follow-{probe.name}", daemon=True).start()

    def _trigger(self, interval: float) -> IntervalTrigger:
        return _PhasedTrigger(seconds=interval, start_date=self._anchor, timezone=timezone.utc)

    def _follow(self, probe: Probe) -> None:
        """Run a round of `probe` whenever it reports a change (until it is replaced or stopped)."""
        last = 0.0
        while not self._stopped.is_set() and self.probes.get(probe.name) is probe:
            try:
                changed = probe.wait_change(FOLLOW_WAIT)  # type: ignore[attr-defined]
            except Exception:
                log.exception("waiting for changes of probe %s failed", probe.name)
                self._stopped.wait(FOLLOW_WAIT)
                continue
            if not changed or self.probes.get(probe.name) is not probe:
                continue
            gap = EVENT_GAP - (time.monotonic() - last)
            if gap > 0 and self._stopped.wait(gap):
                return
            last = time.monotonic()
            self._run_probe(probe.name, wait_turn=True)

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
                if worker is not None:
                    worker.submit(None)  # ends after a round still running, if any
        for p in probes:
            old = self.probes.get(p.name)
            if old is not None and old.reconfigure(p):
                self._sched.reschedule_job(p.name, trigger=self._trigger(old.interval))
                self.store.register(p.name, old.interval)
                continue
            if old is not None:
                old.close()
            self._add(p)
        self.store.unregister_missing(list(self.probes))

    # -- rounds ----------------------------------------------------------------------------
    def _tick(self) -> None:
        self.last_tick = time.monotonic()
        try:
            self._tick_fn()
        except Exception:
            log.exception("periodic evaluation failed")

    def run_now(self, name: str) -> None:
        self._run_probe(name)

    def _run_probe(self, name: str, wait_turn: bool = False) -> None:
        """One round; a scheduled round is skipped while another one (started by change events)
        is under way, a round for change events waits for its turn."""
        probe = self.probes.get(name)
        if probe is None:
            return
        with self._lock:
            turn = self._turns.setdefault(name, threading.Lock())
        got = turn.acquire(timeout=self.timeout_of(probe) + 1.0) if wait_turn else turn.acquire(blocking=False)
        if not got:
            return
        try:
            self._run_probe_turn(name, probe)
        finally:
            turn.release()

    def _run_probe_turn(self, name: str, probe: Probe) -> None:
        timeout = self.timeout_of(probe)
        now = time.time()
        st = self.store.status(name)
        runs = (st.runs_total if st else 0) + 1
        with self._lock:
            stuck = self._inflight.get(name)
        if stuck is not None and not stuck.done.is_set():
            age = time.monotonic() - stuck.started
            msg = f"previous round still running after {age:.0f}s (hung)"
            st = self.store.update_status(name, up=False, hung=True, runs_total=runs, last_run=now,
                                          errors_total=(st.errors_total if st else 0) + 1, last_error=msg)
            log.error("probe %s: %s", name, msg, extra={"probe": name})
            self._finish(name, complete=False)
            return
        rnd = _Round(probe)
        with self._lock:
            self._inflight[name] = rnd
            self._started[name] = rnd.started
            worker = self._workers.get(name)
            if worker is None:
                worker = self._workers[name] = _Worker(name)
        worker.submit(rnd)
        finished = rnd.done.wait(timeout)
        duration = time.monotonic() - rnd.started
        st = self.store.status(name)
        errors = st.errors_total if st else 0
        if not finished:
            msg = f"round timed out after {timeout:g}s"
            self.store.update_status(name, up=False, hung=True, runs_total=runs, last_run=now,
                                     last_duration=duration, errors_total=errors + 1,
                                     timeouts_total=(st.timeouts_total if st else 0) + 1, last_error=msg)
            log.error("probe %s: %s", name, msg, extra={"probe": name})
        else:
            with self._lock:
                self._inflight.pop(name, None)
            if rnd.error is not None:
                msg = _short_error(rnd.error)
                self.store.update_status(name, up=False, hung=False, runs_total=runs, last_run=now,
                                         last_duration=duration, errors_total=errors + 1, last_error=msg)
                level = logging.ERROR if (st is None or st.up or st.last_error != msg) else logging.DEBUG
                log.log(level, "probe %s failed: %s", name, msg, extra={"probe": name},
                        exc_info=rnd.error if not type(rnd.error).__name__ == "ProbeError" and level == logging.ERROR else None)
            else:
                assert rnd.result is not None
                self.store.put(name, rnd.result.value, at=now)
                if st is not None and not st.up and st.runs_total > 0:
                    log.info("probe %s recovered: %s", name, rnd.result.summary, extra={"probe": name})
                self.store.update_status(name, up=True, hung=False, runs_total=runs, last_run=now,
                                         last_success=time.time(), last_duration=duration, last_error=None,
                                         last_result=rnd.result.summary)
        ok = finished and rnd.error is None and rnd.result is not None
        quiet = ok and rnd.result.quiet
        # A round of a probe with change events that found something (new log matches: a NaN
        # line) is judged at once, not after a slow batch mate (an npu round may take seconds).
        found = ok and not quiet and callable(getattr(probe, "wait_change", None))
        self._finish(name, complete=finished, evaluate=not quiet, wait=not found)

    def _finish(self, name: str, complete: bool = True, evaluate: bool = True, wait: bool = True) -> None:
        self._completed[name] = time.monotonic()
        ev = self._first_done.get(name)
        if ev is not None:
            ev.set()
        self._note_first_round()
        try:
            batch = self._gather(name, own=evaluate, wait=wait)
            if batch:
                self.on_round(batch)
        except Exception:
            log.exception("evaluation after probe %s failed", name)
        self._note_round(name, complete)

    def _gather(self, name: str, own: bool = True, wait: bool = True) -> Optional[FrozenSet[str]]:
        """The probes to evaluate for now: none while another round of this round's batch (started
        within BATCH_SECONDS of it) is still under way, since the last of them evaluates for all.
        Another round counts only while it is under way: a hung one is not waited for (its batch
        mates' detectors then run in the next periodic pass, which runs whatever is not fresh).
        A quiet round (`own` False) adds nothing of its own, but when it is the last of its batch
        it still hands over the rounds that waited for it. With `wait` False this round does not
        wait for its batch mates: it takes what has gathered now (later ones gather on their own)."""
        with self._lock:
            if own:
                self._gathered.add(name)
            elif not self._gathered:
                return None
            mine = self._started.get(name)
            if wait and mine is not None and any(
                    other != name and not rnd.done.is_set() and abs(rnd.started - mine) < BATCH_SECONDS
                    for other, rnd in self._inflight.items()):
                return None
            batch, self._gathered = frozenset(self._gathered), set()
            return batch

    def _note_first_round(self) -> None:
        with self._lock:
            if self._first_round_fired or not all(e.is_set() for e in self._first_done.values()):
                return
            self._first_round_fired = True
        if self.on_first_round is not None:
            try:
                self.on_first_round()
            except Exception:
                log.exception("first-round hook failed")

    def _note_round(self, name: str, complete: bool) -> None:
        if self.on_complete_round is None:
            return
        with self._lock:
            if not complete:
                self._round_done.discard(name)
                return
            self._round_done.add(name)
            if not self.probes or not set(self.probes) <= self._round_done:
                return
            self._round_done = set()
        try:
            self.on_complete_round()
        except Exception:
            log.exception("complete-round hook failed")

    # -- health ----------------------------------------------------------------------------
    def wait_first_round(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for ev in list(self._first_done.values()):
            if not ev.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def completing_rounds(self) -> bool:
        """True if the scheduler loop ticks and every probe's rounds complete on time.

        This gates the systemd watchdog ping: a wedged scheduler (or a round wrapper that itself
        hangs) stops the pings and systemd restarts the daemon. A probe that merely fails or times
        out still completes its round wrapper, so it does not stop the pings.
        """
        now = time.monotonic()
        if now - self.last_tick > 30:
            return False
        for name, probe in self.probes.items():
            last = self._completed.get(name)
            budget = probe.interval + self.timeout_of(probe) + self.jitter + 30
            if last is None:
                continue
            if now - last > budget:
                return False
        return True

    def next_runs(self) -> Dict[str, Optional[float]]:
        out: Dict[str, Optional[float]] = {}
        for job in self._sched.get_jobs():
            if job.id == TICK_JOB:
                continue
            out[job.id] = job.next_run_time.timestamp() if job.next_run_time else None
        return out

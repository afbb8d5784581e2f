"""One round of a probe, the thread that runs a probe's rounds, and how a round's outcome is
recorded in the probe's status (up, counters, last error and its reason) and the log."""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Optional, Tuple

from watchdog.host import clock, turns
from watchdog.probes.base import Collected, Probe, ProbeError
from watchdog.core.state import FailureReason, StateStore

log = logging.getLogger("watchdog.scheduler")


class Round:
    """One round of one probe, run by the probe's worker thread."""

    def __init__(self, probe: Probe):
        self.probe = probe
        self.started = time.monotonic()
        self.result: Optional[Collected] = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()
        #: Set once the round is settled (recorded, evaluated; see watchdog.scheduling.watch).
        self.settled = threading.Event()
        #: Told when the round is done (the watch that settles it).
        self.on_done: Optional[Callable[[], None]] = None

    def run(self) -> None:
        try:
            with turns.turn():  # one round's Python work at a time (watchdog.host.turns)
                self.result = self.probe.collect()
        except BaseException as exc:  # noqa: BLE001 - reported, never raised into the scheduler
            self.error = exc
        finally:
            self.done.set()
            if self.on_done is not None:
                self.on_done()


class RoundWorker:
    """The thread that runs one probe's rounds, one after the other (a thread per round cost a
    thread start per round). A round stuck in it is abandoned by the scheduler like before: the
    next rounds are refused ("previous round still running") until it returns."""

    def __init__(self, name: str):
        self._queue: "queue.SimpleQueue[Optional[Round]]" = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=f"probe-{name}", daemon=True).start()

    def submit(self, rnd: Optional[Round]) -> None:
        self._queue.put(rnd)

    def _loop(self) -> None:
        while True:
            rnd = self._queue.get()
            if rnd is None:
                return
            rnd.run()


def pass_wanted(rnd: Round, finished: bool) -> Tuple[bool, bool]:
    """(evaluate, wait) for a settled round's detector pass: a quiet round (nothing new) adds
    nothing of its own; a round of a probe with change events that found something (new log
    matches: a NaN line) is judged at once, not after a slow batch mate (an npu round may take
    seconds)."""
    ok = finished and rnd.error is None and rnd.result is not None
    quiet = ok and rnd.result is not None and rnd.result.quiet
    found = ok and not quiet and rnd.probe.follows_changes
    return not quiet, not found


def short_error(exc: BaseException) -> str:
    """A ProbeError's own message; anything else (a bug) is named by its type."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, ProbeError):
        return text[:500]
    name = type(exc).__name__
    return f"{name}: {text}"[:500] if text else name


def record_stuck(store: StateStore, name: str, stuck: Round, runs: int, now: float) -> None:
    """The previous round is still running: this one is refused and counted as an error."""
    st = store.status(name)
    age = time.monotonic() - stuck.started
    msg = f"previous round still running after {age:.0f}s (hung)"
    store.update_status(name, up=False, hung=True, runs_total=runs, last_run=now,
                        errors_total=(st.errors_total if st else 0) + 1, last_error=msg, reason=None)
    log.error("probe %s: %s", name, msg, extra={"probe": name})


def record_round(store: StateStore, name: str, rnd: Round, finished: bool, timeout: float,
                 runs: int, now: float) -> None:
    """Record a round that finished (with an observation or an error) or timed out."""
    duration = time.monotonic() - rnd.started
    st = store.status(name)
    errors = st.errors_total if st else 0
    if not finished:
        msg = f"round timed out after {timeout:g}s"
        store.update_status(name, up=False, hung=True, runs_total=runs, last_run=now,
                            last_duration=duration, errors_total=errors + 1, reason=None,
                            timeouts_total=(st.timeouts_total if st else 0) + 1, last_error=msg)
        log.error("probe %s: %s", name, msg, extra={"probe": name})
    elif rnd.error is not None:
        msg = short_error(rnd.error)
        reason = rnd.error.reason if isinstance(rnd.error, ProbeError) else FailureReason.UNEXPECTED
        store.update_status(name, up=False, hung=False, runs_total=runs, last_run=now,
                            last_duration=duration, errors_total=errors + 1, last_error=msg, reason=reason)
        level = logging.ERROR if (st is None or st.up or st.last_error != msg) else logging.DEBUG
        # A traceback only for what no probe expected (a bug); a ProbeError says it all.
        log.log(level, "probe %s failed: %s", name, msg, extra={"probe": name},
                exc_info=rnd.error if reason is FailureReason.UNEXPECTED and level == logging.ERROR else None)
    else:
        assert rnd.result is not None
        store.put(name, rnd.result.value, at=now)
        if st is not None and not st.up and st.runs_total > 0:
            log.info("probe %s recovered: %s", name, rnd.result.summary, extra={"probe": name})
        store.update_status(name, up=True, hung=False, runs_total=runs, last_run=now,
                            last_success=clock.now(), last_duration=duration, last_error=None,
                            last_result=rnd.result.summary, reason=None)

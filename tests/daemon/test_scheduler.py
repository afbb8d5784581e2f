"""The scheduler contains probe failures: exceptions and hangs mark the probe down, nothing else."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import datetime, timezone

from tests.helpers import wait_for
from watchdog.probes.base import Collected, Probe, ProbeError
from watchdog.scheduler import ProbeScheduler
from watchdog.core.state import FailureReason, StateStore


class Blocking(Probe):
    def __init__(self, name, release):
        self.name, self.interval, self.timeout, self.release = name, 0.3, 0.3, release

    def collect(self):
        self.release.wait()
        return Collected("late", "late")


class Counting(Probe):
    def __init__(self, name):
        self.name, self.interval, self.timeout, self.n = name, 0.2, 1.0, 0

    def collect(self):
        self.n += 1
        return Collected(self.n, f"round {self.n}")


class Failing(Probe):
    name, interval, timeout = "failing", 0.2, 1.0

    def collect(self):
        raise ProbeError("device file /dev/davinci9 not readable")


class Missing(Probe):
    name, interval, timeout = "missing", 0.2, 1.0

    def collect(self):
        raise ProbeError("npu-smi missing: not on PATH", FailureReason.MISSING)


class Buggy(Probe):
    name, interval, timeout = "buggy", 0.2, 1.0

    def collect(self):
        return {}["no such key"]


def test_hung_round_is_abandoned_and_reported_without_blocking_others():
    store = StateStore()
    release = threading.Event()
    rounds = []
    sched = ProbeScheduler(store, 5.0, 0.0, on_round=lambda batch: rounds.extend(batch), tick=lambda: None)
    blocking, counting = Blocking("blocking", release), Counting("counting")
    sched.start([blocking, counting])
    try:
        wait_for(lambda: (store.status("blocking").timeouts_total or 0) >= 1, what="timeout")
        st = store.status("blocking")
        # The round timed out (counted); its text may already be the next round's stuck-round one.
        assert not st.up and st.hung and st.timeouts_total >= 1
        assert "timed out after 0.3s" in st.last_error or "previous round still running" in st.last_error
        # Next rounds see the previous one still stuck instead of starting another thread.
        wait_for(lambda: "previous round still running" in (store.status("blocking").last_error or ""),
                 what="stuck-round report")
        assert len([t for t in threading.enumerate() if t.name == "probe-blocking"]) == 1
        wait_for(lambda: counting.n >= 5, what="other probe keeps running")
        assert store.status("counting").up
        # Rounds still complete (the wrapper returns), so the systemd watchdog keeps being fed.
        assert sched.completing_rounds()
        release.set()
        wait_for(lambda: store.status("blocking").up, what="recovery after the hang ends")
        assert store.view().latest("blocking").value == "late"
    finally:
        release.set()
        sched.shutdown()
    assert "blocking" in rounds and "counting" in rounds


def test_exception_marks_probe_down_with_message():
    store = StateStore()
    sched = ProbeScheduler(store, 5.0, 0.0, on_round=lambda n: None, tick=lambda: None)
    sched.start([Failing()])
    try:
        wait_for(lambda: (store.status("failing").errors_total or 0) >= 2, what="errors counted")
        st = store.status("failing")
        assert not st.up and st.last_error == "device file /dev/davinci9 not readable"
        assert st.reason is FailureReason.ERROR
        assert st.last_success is None and store.view().latest("failing") is None
    finally:
        sched.shutdown()


def test_a_failure_keeps_the_probes_reason_and_a_bug_is_named_by_its_type():
    """Detectors tell failures apart by the typed reason, never by the wording of the message."""
    store = StateStore()
    sched = ProbeScheduler(store, 5.0, 0.0, on_round=lambda n: None, tick=lambda: None)
    sched.start([Missing(), Buggy(), Counting("counting")])
    try:
        wait_for(lambda: all((store.status(n).errors_total or 0) >= 1 for n in ("missing", "buggy")),
                 what="both failures recorded")
        missing, buggy = store.status("missing"), store.status("buggy")
        assert missing.reason is FailureReason.MISSING and missing.last_error == "npu-smi missing: not on PATH"
        assert buggy.reason is FailureReason.UNEXPECTED and buggy.last_error == "KeyError: 'no such key'"
        wait_for(lambda: store.status("counting").up, what="a good round")
        assert store.status("counting").reason is None
    finally:
        sched.shutdown()


def test_state_history_is_bounded_by_age():
    store = StateStore(history_seconds=10)
    for t in range(100):
        store.put("p", t, at=1000.0 + t)
    hist = store.view().history("p")
    assert [s.value for s in hist][0] >= 89 and hist[-1].value == 99
    assert all(s.time >= 1099 - 10 for s in hist)


def test_completing_rounds_false_when_scheduler_is_wedged():
    store = StateStore()
    sched = ProbeScheduler(store, 5.0, 0.0, on_round=lambda n: None, tick=lambda: None)
    sched.last_tick = time.monotonic() - 120
    assert not sched.completing_rounds()


def test_probes_of_one_interval_share_one_grid():
    """One random offset per daemon (jitter), not per run: every probe of an interval runs on the
    daemon's shifted grid (anchor + k * interval), so probes of one interval start their rounds
    together. The first round runs at once outside the schedule; APScheduler's own trigger plans
    the rest from k = 1 on, each from the last. Checked on the triggers themselves (no thread
    timing enters)."""
    sched = ProbeScheduler(StateStore(), 5.0, 0.3, on_round=lambda b: None, tick=lambda: None)
    anchor = sched._anchor.timestamp()
    now = datetime.now(timezone.utc)

    def on_grid(t):
        k = t.timestamp() - anchor
        return abs(k - round(k)) < 1e-3

    fast, slow = sched._trigger(1.0), sched._trigger(1.0)
    first = fast.get_next_fire_time(None, now)
    assert first == slow.get_next_fire_time(None, now) and on_grid(first)
    assert 0.99 <= first.timestamp() - anchor <= 1.01  # k = 1: the round at k = 0 ran at once
    prev = first
    for _ in range(5):
        nxt = fast.get_next_fire_time(prev, now)
        assert on_grid(nxt) and abs((nxt - prev).total_seconds() - 1.0) < 1e-3, (prev, nxt)
        prev = nxt


def test_rounds_of_one_batch_get_one_detector_pass(monkeypatch):
    """The last round of a batch to finish hands the whole batch to one detector pass: the round
    that ends first leaves its pass to the one still under way (gated, so no timing)."""
    import watchdog.scheduling.batch as batch_mod

    monkeypatch.setattr(batch_mod, "BATCH_SECONDS", 3600.0)  # one batch however slow the machine
    fast, slow = Gated("fast", quiet=False), Gated("slow", quiet=False)
    sched, batches = batch_of(fast, slow)
    fast.release.set()
    try:
        with round_under_way(sched, slow):
            sched.run_now("fast")
            assert batches == []
    finally:
        sched.shutdown()
    assert batches == [frozenset({"fast", "slow"})]


class Gated(Probe):
    """A round that waits for `release`; its result is `quiet` (nothing new, like a logs round
    that read no new lines)."""

    def __init__(self, name, quiet):
        self.name, self.interval, self.timeout, self.quiet = name, 3600.0, 30.0, quiet
        self.entered, self.release = threading.Event(), threading.Event()

    def collect(self):
        self.entered.set()
        self.release.wait(30)
        return Collected(1, "ok", quiet=self.quiet)


def batch_of(*probes):
    """A scheduler that knows `probes` (rounds run by hand with `run_now`) and the batches it
    hands to the detector pass."""
    store = StateStore()
    batches = []
    sched = ProbeScheduler(store, 30.0, 0.0, on_round=batches.append, tick=lambda: None)
    for p in probes:
        sched.probes[p.name] = p
        store.register(p.name, p.interval)
    return sched, batches


@contextlib.contextmanager
def round_under_way(sched, gated):
    """Inside the block, a round of `gated` is under way (run in a thread, held at its gate);
    after it, the round is released and has finished."""
    slow = threading.Thread(target=sched.run_now, args=(gated.name,))
    slow.start()
    try:
        assert gated.entered.wait(30)
        yield
    finally:
        gated.release.set()
        slow.join(30)


def test_a_round_waiting_for_a_quiet_batch_mate_is_still_evaluated(monkeypatch):
    """A round that finishes first leaves the detector pass to the last of its batch; when that
    last one is a quiet round (it evaluates nothing of its own), the waiting round must still get
    its pass, not sit unevaluated until some later round happens to gather it."""
    import watchdog.scheduling.batch as batch_mod

    monkeypatch.setattr(batch_mod, "BATCH_SECONDS", 3600.0)  # both rounds in one batch, however slow the machine
    npu, logs = Gated("npu", quiet=False), Gated("logs", quiet=True)
    sched, batches = batch_of(npu, logs)
    npu.release.set()
    try:
        with round_under_way(sched, logs):
            sched.run_now("npu")  # finishes while the logs round is under way: leaves the pass to it
            assert batches == []
    finally:
        sched.shutdown()
    assert batches == [frozenset({"npu"})]


class GatedLines(Gated):
    """A probe with change events (like the logs probe) whose round found new matches."""

    def wait_change(self, timeout):
        return False


def test_a_round_that_found_log_matches_is_evaluated_without_waiting_for_a_slow_batch_mate(monkeypatch):
    """A NaN line read by the logs probe is judged as soon as its round ends, as before rounds were
    batched: it does not wait for an npu round of its batch that is still running (npu-smi may take
    seconds, up to the probe timeout)."""
    import watchdog.scheduling.batch as batch_mod

    monkeypatch.setattr(batch_mod, "BATCH_SECONDS", 3600.0)
    npu, logs = Gated("npu", quiet=False), GatedLines("logs", quiet=False)
    sched, batches = batch_of(npu, logs)
    logs.release.set()
    try:
        with round_under_way(sched, npu):
            sched.run_now("logs")
            assert batches == [frozenset({"logs"})]
    finally:
        sched.shutdown()
    assert batches == [frozenset({"logs"}), frozenset({"npu"})]


def test_rounds_after_the_first_follow_the_daemons_random_offset(monkeypatch):
    """`probes.jitter`: one random offset per daemon shifts every probe's schedule, so a fleet
    started together does not probe in lock-step. The first round runs at once (start, reload);
    the next ones must fall on the shifted grid, not on `interval` after that first round."""
    import watchdog.scheduler as scheduler_mod

    monkeypatch.setattr(scheduler_mod.random, "uniform", lambda a, b: 1000.0)  # the drawn offset
    store = StateStore()
    t0 = time.time()
    sched = ProbeScheduler(store, 5.0, 1800.0, on_round=lambda batch: None, tick=lambda: None)
    probe = Counting("counting")
    probe.interval = 3600.0
    sched.start([probe])
    try:
        wait_for(lambda: probe.n >= 1 and (sched.next_runs()["counting"] or 0) > t0 + 10, what="the first round")
        nxt = sched.next_runs()["counting"]
    finally:
        sched.shutdown()
    phase = (nxt - (t0 + 1000.0)) % 3600.0  # on the daemon's grid (t0 + 1000 s + k * 3600 s),
    assert min(phase, 3600.0 - phase) < 60, nxt - t0  # not the first round + 3600 s


class SlowToStart(Counting):
    """Its first round is handed over only when `proceed` is set: the scheduler stays in its
    start (its jobs pending, not yet scheduled) for as long as the test wants."""

    def __init__(self, name, entered, proceed):
        super().__init__(name)
        self.entered, self.proceed = entered, proceed

    @property
    def timeout(self):
        self.entered.set()
        self.proceed.wait(10)
        return 1.0

    @timeout.setter
    def timeout(self, value):
        pass


def test_the_schedule_is_readable_while_the_scheduler_starts():
    """/api/status answers from the daemon's first moment, while the scheduler is still adding its
    jobs: a job not yet scheduled has no next run (it once failed the whole status document)."""
    store = StateStore()
    entered, proceed = threading.Event(), threading.Event()
    sched = ProbeScheduler(store, 5.0, 0.0, on_round=lambda n: None, tick=lambda: None)
    starting = threading.Thread(target=sched.start, args=([Counting("counting"), SlowToStart("slow", entered, proceed)],))
    starting.start()
    try:
        assert entered.wait(10)
        assert sched.next_runs() == {"counting": None, "slow": None}
    finally:
        proceed.set()
        starting.join()
    try:
        runs = wait_for(lambda: all(sched.next_runs().values()) and sched.next_runs(), what="scheduled runs")
        assert set(runs) == {"counting", "slow"} and all(at > time.time() - 5 for at in runs.values())
    finally:
        sched.shutdown()


class Closing(Counting):
    def __init__(self, name):
        super().__init__(name)
        self.closed = threading.Event()

    def close(self):
        self.closed.set()


def test_a_periodic_pass_stuck_in_io_does_not_hold_the_stop(monkeypatch, caplog):
    """APScheduler joins its own thread on shutdown with no bound, and that thread runs the
    periodic detector pass: a pass stuck for ever (a state write on a hung disk) held SIGTERM
    until systemd's kill, and the probes never saved their progress. The stop now goes on."""
    import watchdog.scheduler as scheduler_mod

    monkeypatch.setattr(scheduler_mod, "TICK_SECONDS", 0.1)
    monkeypatch.setattr(scheduler_mod, "STOP_WAIT", 0.5)
    in_tick, release = threading.Event(), threading.Event()

    def stuck_tick():
        in_tick.set()
        release.wait()

    sched = ProbeScheduler(StateStore(), 5.0, 0.0, on_round=lambda batch: None, tick=stuck_tick)
    probe = Closing("counting")
    sched.start([probe])
    try:
        assert in_tick.wait(30), "the periodic pass never ran"
        stopper = threading.Thread(target=sched.shutdown, daemon=True)
        stopper.start()
        # The probes are closed (their progress saved) while the pass is still stuck.
        assert probe.closed.wait(30), "the stop waited on the stuck periodic pass"
        stopper.join(30)
        assert not stopper.is_alive()
        assert not release.is_set()
        assert any("still running a job" in r.getMessage() for r in caplog.records)
    finally:
        release.set()


def test_the_gap_between_event_rounds_doubles_while_they_find_nothing():
    """scheduler.next_gap: a quiet round doubles it up to MAX_EVENT_GAP; a round that found
    something, failed, left a backlog or did not start brings EVENT_GAP back."""
    from watchdog.probes.base import Collected
    from watchdog.scheduler import EVENT_GAP, MAX_EVENT_GAP, next_gap
    from watchdog.scheduling.rounds import Round

    def rnd(**kw):
        r = Round(Gated("logs", quiet=True))
        r.result = Collected(None, **kw)
        return r

    gaps = [EVENT_GAP]
    for _ in range(6):
        gaps.append(next_gap(gaps[-1], rnd(quiet=True)))
    assert gaps == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0, 2.0] and MAX_EVENT_GAP == 2.0
    assert next_gap(2.0, rnd(quiet=False)) == EVENT_GAP
    assert next_gap(2.0, rnd(quiet=True, more=True)) == EVENT_GAP
    failed = rnd(quiet=True)
    failed.error = RuntimeError("x")
    assert next_gap(2.0, failed) == EVENT_GAP
    assert next_gap(2.0, None) == EVENT_GAP


def test_the_kernel_follower_never_spaces_its_rounds_out():
    """/dev/kmsg overwrites what is not read: a flood of records no rule matches, read every 2 s,
    would wrap the ring and take a segfault record with it (an attack pass lost 5,998 of 14,172
    records that way). Its quiet rounds keep the 0.25 s gap."""
    from watchdog.probes.base import Collected
    from watchdog.probes.kernel import KernelProbe
    from watchdog.scheduler import EVENT_GAP, next_gap
    from watchdog.scheduling.rounds import Round

    class Ring(Gated):
        spaces_quiet_rounds = KernelProbe.spaces_quiet_rounds

    r = Round(Ring("kernel", quiet=True))
    r.result = Collected(None, quiet=True)
    assert KernelProbe.spaces_quiet_rounds is False
    assert next_gap(EVENT_GAP, r) == EVENT_GAP and next_gap(2.0, r) == EVENT_GAP


class Changes(Probe):
    """A probe with change events, pending like the logs probe's: `wait_change` moves the changes
    that arrived into the pending set, a round takes the pending set (quiet unless it holds a
    change named "NaN")."""

    def __init__(self):
        self.name, self.interval, self.timeout = "logs", 3600.0, 30.0
        self._cond = threading.Condition()
        self.arrived, self.pending, self.rounds = [], [], []

    def arrive(self, change):
        with self._cond:
            self.arrived.append(change)
            self._cond.notify_all()

    def wait_change(self, timeout):
        with self._cond:
            if not self._cond.wait_for(lambda: self.arrived, timeout):
                return False
            self.pending += self.arrived
            self.arrived = []
            return True

    def collect(self):
        with self._cond:
            taken, self.pending = self.pending, []
        self.rounds.append(taken)
        return Collected(taken, "", quiet="NaN" not in taken)


def test_a_change_that_comes_while_the_gap_is_waited_out_is_in_the_next_round(monkeypatch):
    """The gap between event rounds is waited out before the changes are collected: a NaN line in
    one log that comes while a chatty other log's rounds are spaced out is read by the next round,
    not left for the one after (which came a whole gap later: 2.6-3.6 s with 2 s gaps)."""
    import watchdog.scheduler as scheduler_mod

    monkeypatch.setattr(scheduler_mod, "EVENT_GAP", 0.5)
    monkeypatch.setattr(scheduler_mod, "MAX_EVENT_GAP", 1.0)
    probe = Changes()
    store = StateStore()
    sched = ProbeScheduler(store, 30.0, 0.0, on_round=lambda batch: None, tick=lambda: None)
    sched.probes[probe.name] = probe
    store.register(probe.name, probe.interval)
    follower = threading.Thread(target=scheduler_mod.follow_changes, args=(sched, probe), daemon=True)
    follower.start()
    try:
        probe.arrive("chatter 1")
        wait_for(lambda: probe.rounds == [["chatter 1"]], what="the first round")  # quiet: the gap is 1 s now
        probe.arrive("chatter 2")  # at once, as a progress bar writes
        time.sleep(0.2)  # well inside the 1 s gap
        probe.arrive("NaN")
        wait_for(lambda: any("NaN" in r for r in probe.rounds), timeout=30, what="the NaN read")
        assert probe.rounds == [["chatter 1"], ["chatter 2", "NaN"]], probe.rounds
    finally:
        sched.shutdown()
        follower.join(10)

"""The alert engine's timer wakes when something can be due, not every second, and the silences
are read from SQLite when they changed, not at every pass; every timing stays what it was.

The timer is driven on a fake clock the way its thread runs it (`_timer_pass` returns how long
the thread sleeps; `process` sets the wake event when it makes something due sooner), and the
same story is replayed on an engine polled 20 times a second: both must send the same messages
at the same (fake) times. Work is counted (timer passes, reads of the silences table), never timed.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Dict, List, Tuple

import pytest

from tests.fakes.receivers import Receiver
from tests.alertkit import Clock, f, make_config, open_engine
from watchdog.alerting.engine import MAX_SLEEP, AlertEngine
from watchdog.alerting.decide.notification import Notification
from watchdog.alerting.deliver.store import AlertStore

Event = Tuple[float, Callable[[], None]]


@pytest.fixture
def engines():
    made: List[AlertEngine] = []
    yield made
    for e in made:
        e.close()


@pytest.fixture
def rx():
    with Receiver("webhook") as r:
        yield r


def new_engine(engines, cfg) -> AlertEngine:
    clock = Clock()
    clock.now = float(int(clock.now))  # whole seconds: every time in the stories below is exact
    e = open_engine(cfg, clock=clock)
    engines.append(e)
    return e


def count_table_reads(e: AlertEngine) -> List[int]:
    """Counts queries of the silences table (the store's `silences`)."""
    n = [0]
    read = e.store.silences

    def counted():
        n[0] += 1
        return read()

    e.store.silences = counted
    return n


def record_notifications(e: AlertEngine, record: Callable[[Notification], None]) -> None:
    """Calls `record` with every notification the engine's core decides on (in pass order)."""
    settle = e.core.settle

    def recorded(*args, **kwargs):
        result = settle(*args, **kwargs)
        for n in result.notifications:
            record(n)
        return result

    e.core.settle = recorded


def run_timer(e: AlertEngine, until: float, events: List[Event]) -> None:
    """What the timer thread does, on the fake clock: pass (if due), sleep the returned time or
    until `process` sets the wake event; `events` (sorted, at fake times) happen meanwhile."""
    clock = e.clock
    events = list(events)
    wake = clock.now
    while clock.now < until:
        if events and events[0][0] <= wake:
            at, fn = events.pop(0)
            clock.now = max(clock.now, at)
            fn()
            if e.timer.wake.is_set():
                e.timer.wake.clear()
                wake = clock.now
            continue
        clock.now = min(wake, until)
        if clock.now >= until:
            break
        wake = clock.now + e._timer_pass()


def run_poll(e: AlertEngine, until: float, events: List[Event], step: float = 0.0625) -> None:
    """The reference: a pass every `step` (fake) seconds (16 a second: a binary fraction, so the
    fake clock hits every deadline of the stories exactly), events in between."""
    clock = e.clock
    events = list(events)
    while clock.now < until:
        while events and events[0][0] <= clock.now:
            events.pop(0)[1]()
        e.tick()
        clock.now += step


def test_idle_engine_neither_polls_nor_reads_silences(tmp_path, engines):
    e = new_engine(engines, make_config(tmp_path, "http://127.0.0.1:9/hook"))
    reads = count_table_reads(e)
    passes = []
    evaluate = e._evaluate
    e._evaluate = lambda now, observe: (passes.append(now), evaluate(now, observe))
    t0 = e.clock.now
    # Detector passes every 2 s with nothing found, for 5 minutes: the first one is evaluated,
    # the others change nothing and are not; the timer looks every MAX_SLEEP (was: every second).
    run_timer(e, t0 + 300, [(t0 + i * 2.0, lambda: e.process([])) for i in range(150)])
    assert e.timer_passes == len(range(1, math.ceil(300 / MAX_SLEEP)))  # at 30, 60, ... 270 s
    assert len(passes) == 1 + e.timer_passes
    assert reads[0] <= 1  # the timer's passes keep pruning old silences: one read, not 160


def test_timer_thread_of_an_idle_engine_sleeps(tmp_path, monkeypatch):
    passes = []
    real_tick = AlertEngine.tick
    monkeypatch.setattr(AlertEngine, "tick", lambda self, now=None: (passes.append(now), real_tick(self, now)))
    e = open_engine(make_config(tmp_path, "http://127.0.0.1:9/hook"), timer=True)
    try:
        e.process([])
        time.sleep(2.5)  # the old timer passed every second: 2 passes here
        assert passes == []
    finally:
        e.close()


def test_a_pending_alert_wakes_the_timer_for_its_deadlines(tmp_path, rx):
    """Real thread, real clock: one detector pass, then the timer alone fires the alert after its
    `for` and sends it after the group window (nothing else calls the engine)."""
    cfg = make_config(tmp_path, rx.url, group_window="300ms", **{"for": {"stall": "400ms"}})
    e = open_engine(cfg, timer=True)
    try:
        e.process([f("stall", "critical")])
        [msg] = rx.wait_for(1)
        assert msg.json["status"] == "firing"
        [a] = e.alert_states()
        assert a.last_notified - a.pending_since >= 0.7
    finally:
        e.close()


def test_a_silence_from_another_process_is_read_once_and_applies_at_the_next_pass(tmp_path, engines):
    cfg = make_config(tmp_path, "http://127.0.0.1:9/hook", group_window="0s")
    e = new_engine(engines, cfg)
    reads = count_table_reads(e)
    cli = AlertStore(cfg.paths.state_dir)  # like `npu-watchdog silence add` in its own process
    try:
        stall = f("stall", "critical")
        e.process([f("stall", "critical"), f("command_check", check="fs")])
        assert e.alert_states() and all(a.state == "firing" for a in e.alert_states())
        before = reads[0]
        s = cli.add_silence(["rule=stall"], e.clock.now, e.clock.now + 60, "tester", "maintenance")
        e.clock.now += 0.5
        e.process([stall, f("command_check", check="fs")])
        muted = {a.rule: a.muted for a in e.alert_states()}
        assert muted == {"stall": f"silenced:{s.id}", "command_check": None}
        for _ in range(20):
            e.clock.now += 0.5
            e.process([stall, f("command_check", check="fs")])
            e.tick()
        assert reads[0] == before + 1  # read once after the change (was: at every pass)
        assert cli.remove_silence(s.id)
        e.process([stall, f("command_check", check="fs")])
        assert {a.rule: a.muted for a in e.alert_states()} == {"stall": None, "command_check": None}
        assert reads[0] == before + 2
    finally:
        cli.close()


def story(e: AlertEngine, cli: AlertStore) -> Tuple[List[Event], Dict[str, list]]:
    """Detector passes every 10 s (fake) over 2 minutes, with a `for`, group windows, reminders,
    silences starting and ending between passes, resolve delays and Alertmanager refreshes all
    falling between passes, so only the timer can meet them."""
    t0 = e.clock.now
    sent: Dict[str, list] = {"notes": []}
    record_notifications(e, lambda n: sent["notes"].append((n.kind, round(n.created - t0, 2), sorted(n.rules()))))

    def findings(t: float) -> list:
        out = []
        if t < 100:
            out.append(f("stall", "critical"))
        if 20 <= t < 60:
            out.append(f("command_check", check="fs"))
        if 70 <= t <= 80:
            out.append(f("log_oom", "critical", log_rule="npu_oom"))
        return out

    events: List[Event] = [(t0 + t, lambda t=t: e.process(findings(t))) for t in range(0, 130, 10)]
    events.append((t0 + 21, lambda: cli.add_silence(["rule=command_check"], t0 + 24.25, t0 + 40.75, "tester", "a")))
    events.append((t0 + 69, lambda: cli.add_silence(["rule=log_oom"], t0 + 69, t0 + 75.5, "tester", "b")))
    events.sort(key=lambda ev: ev[0])
    return events, sent


@pytest.mark.parametrize("drift", [0.0, 0.3, -0.3])
def test_timer_meets_every_deadline_a_fine_poll_meets(tmp_path, engines, rx, drift, monkeypatch):
    # `drift`: the wall clock ahead of the daemon's steady clock by that much, less than a step
    # (a VM's clock is adjusted under a long-lived process): a silence still ends on time.
    from watchdog.host.clock import CLOCK
    monkeypatch.setattr(CLOCK, "_wall0", CLOCK._wall0 - drift)
    with Receiver("alertmanager") as am:
        def cfg(name):
            return make_config(tmp_path / name, rx.url, group_window="2s", resolve_delay="15s", reminder="30s",
                               **{"for": {"stall": "3s", "command_check": "0s", "log_oom": "0s"},
                                  "channels": [{"type": "webhook", "name": "hook", "url": rx.url},
                                               {"type": "alertmanager", "name": "am", "url": am.url,
                                                "resend_interval": "25s"}]})
        results = []
        for name, run in (("poll", run_poll), ("timer", run_timer)):
            c = cfg(name)
            e = new_engine(engines, c)
            cli = AlertStore(c.paths.state_dir)
            events, sent = story(e, cli)
            run(e, e.clock.now + 130, events)
            cli.close()
            results.append((sent["notes"], e))
    (polled, poll_engine), (timed, timer_engine) = results
    kinds = {k for k, _, _ in polled}
    assert kinds == {"firing", "reminder", "resolved", "refresh"}, polled  # the story covers them all
    assert timed == polled  # the same messages, at the same times
    assert not timer_engine.alert_states() and not poll_engine.alert_states()
    assert timer_engine.timer_passes < 60  # the poll made 2080 passes


def silenced_stall(tmp_path, engines):
    """An engine with a stall alert firing under a silence added by a CLI's own store: (engine,
    that store, the silence, the (kind, seconds after start) of each notification, start)."""
    cfg = make_config(tmp_path, "http://127.0.0.1:9/hook", group_window="0s")
    e = new_engine(engines, cfg)
    cli = AlertStore(cfg.paths.state_dir)
    t0 = e.clock.now
    s = cli.add_silence(["rule=stall"], t0, t0 + 3600, "tester", "maintenance")
    sent = []
    record_notifications(e, lambda n: sent.append((n.kind, n.created - t0)))
    e.process([f("stall", "critical")])
    return e, cli, s, sent, t0


def test_while_an_alert_fires_a_silence_change_takes_effect_within_a_second(tmp_path, engines):
    """The `silence` CLI writes from its own process; with no detector pass in between, the
    timer notices (one cheap query a second, only while something fires) and releases at once
    what the removed silence held back."""
    e, cli, s, sent, t0 = silenced_stall(tmp_path, engines)
    try:
        [a] = e.alert_states()
        assert a.state == "firing" and a.muted == f"silenced:{s.id}" and sent == []
        run_timer(e, t0 + 20, [(t0 + 5.25, lambda: cli.remove_silence(s.id))])
        assert sent and sent[0][0] == "firing" and 5.25 <= sent[0][1] <= 5.25 + 1.0
    finally:
        cli.close()


def test_a_metrics_scrape_right_after_a_silence_change_does_not_hide_it_from_the_timer(tmp_path, engines):
    """Reading the silences for the `silences_active` gauge takes in the change the timer watches
    for (`PRAGMA data_version`); the timer must still run its pass, so the alert the removed
    silence held back is sent within a second, scrape or not."""
    e, cli, s, sent, t0 = silenced_stall(tmp_path, engines)
    try:
        assert e.alert_states()[0].muted == f"silenced:{s.id}" and sent == []
        run_timer(e, t0 + 20, [(t0 + 5.25, lambda: cli.remove_silence(s.id)),
                               (t0 + 5.5, lambda: e.silences_active() == 0 or pytest.fail("still active"))])
        assert sent and sent[0][0] == "firing" and 5.25 <= sent[0][1] <= 5.25 + 1.0, sent
    finally:
        cli.close()

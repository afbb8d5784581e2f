"""The durable outbox: commit before send, retries with Retry-After, rate limits, giving up."""

from __future__ import annotations

import threading
import time

import yaml

from tests.fakes.receivers import Answer, Receiver, closed_port
from tests.helpers import wait_for
from watchdog.alerting.deliver.outbox import Outbox, RateLimiter
from watchdog.alerting.deliver.store import AlertStore
from watchdog.config.load import load_config_text


def outbox(tmp_path, channels, **extra):
    al = {"channels": channels, "retry_initial": "200ms", "retry_max": "500ms"}
    al.update(extra)
    cfg = load_config_text(yaml.safe_dump({"paths": {"state_dir": str(tmp_path)}, "alerting": al}))
    store = AlertStore(str(tmp_path))
    return store, Outbox(store, cfg.alerting)


def note(i=0):
    return {"kind": "firing", "status": "firing", "ikey": f"k{i}", "created": time.time(),
            "group": {"host": "h", "training_job": "j"},
            "alerts": [{"fp": "x", "rule": "stall", "severity": "critical", "summary": f"stall {i}",
                        "labels": {"host": "h", "training_job": "j"}, "evidence": []}]}


def test_rate_limiter_windows():
    rl = RateLimiter([(5, 1.0), (100, 60.0)])
    for i in range(5):
        assert rl.wait_time(100.0) == 0
        rl.record(100.0)
    assert 0.99 < rl.wait_time(100.0) <= 1.0
    assert rl.wait_time(101.01) == 0
    rl.block(200.0)
    assert rl.wait_time(150.0) == 50.0


def test_committed_before_send_and_retry_after_is_honoured(tmp_path):
    with Receiver("slack") as rx:
        rx.script(Answer(429, "rate_limited", headers={"Retry-After": "1"}))
        # retry_max above the Retry-After: the vendor's word is kept up to the configured maximum.
        store, ob = outbox(tmp_path, [{"type": "slack", "name": "s", "url": rx.url}], retry_max="2s")
        ob.enqueue([("s", "k1", "firing", note(1))])
        assert store.outbox_stats()[0] == 1  # durable before any attempt
        ob.start()
        try:
            [ok] = rx.wait_for(1)
            first, second = rx.requests[0], ok
            assert second.time - first.time >= 0.9  # waited as told, not the 200ms backoff
            wait_for(lambda: store.outbox_stats()[0] == 0, what="row removed after delivery")
            assert ob.counts[("s", "retried")] == 1 and ob.counts[("s", "sent")] == 1
        finally:
            ob.stop()


def test_feishu_burst_respects_five_per_second(tmp_path):
    with Receiver("feishu") as rx:
        store, ob = outbox(tmp_path, [{"type": "feishu", "name": "f", "url": rx.url}])
        ob.enqueue([("f", f"k{i}", "firing", note(i)) for i in range(7)])
        ob.start()
        try:
            reqs = rx.wait_for(7)
            times = sorted(r.time for r in reqs)
            assert times[5] - times[0] >= 0.95  # the sixth waited for the 1s window
        finally:
            ob.stop()


def test_gives_up_after_max_age_and_fails_fast_on_bad_token(tmp_path):
    with Receiver("wecom", path="/cgi-bin/webhook/send?key=") as bad:
        store, ob = outbox(tmp_path, [
            {"type": "webhook", "name": "down", "url": f"http://127.0.0.1:{closed_port()}/h"},
            {"type": "wecom", "name": "badkey", "url": bad.url},
        ], max_age="1500ms")
        lost = []
        ob.on_lost = lost.append
        ob.enqueue([("down", "k1", "firing", note(1)), ("badkey", "k2", "firing", note(2))])
        ob.start()
        try:
            wait_for(lambda: ob.counts[("down", "expired")] == 1, what="expired")
            assert ob.counts[("down", "retried")] >= 2
            assert ob.counts[("badkey", "failed")] == 1 and len(bad.requests) == 1
            assert store.outbox_stats()[0] == 0
            # Each drop is reported once (the daemon raises notifications_failing from these).
            by = {x.channel: x for x in lost}
            assert len(lost) == 2 and by["down"].outcome == "expired" and by["badkey"].outcome == "failed"
            assert by["badkey"].rules == ("stall",) and by["badkey"].severity == "critical"
            assert "permanent failure" in by["badkey"].error and "connection" in by["down"].error
        finally:
            ob.stop()


def test_reload_during_a_send_never_delivers_twice(tmp_path):
    """The receiver answers the first attempt only after 3 s (longer than a sender is waited
    for on stop); a reload lands meanwhile. The row in flight must not get a second sender."""
    with Receiver("slack") as rx:
        rx.script(Answer(200, "ok", delay=3.0))
        chans = [{"type": "slack", "name": "s", "url": rx.url, "read_timeout": "10s"}]
        store, ob = outbox(tmp_path, chans)
        ob.enqueue([("s", "k1", "firing", note(1))])
        ob.start()
        try:
            rx.wait_arrived(1)  # the attempt is in flight: its answer comes in 3 s
            new = load_config_text(yaml.safe_dump({"paths": {"state_dir": str(tmp_path)}, "alerting": {
                "channels": [dict(chans[0], rate_limits=[{"count": 2, "per": "1s"}])], "max_age": "2h",
                "retry_initial": "200ms", "retry_max": "500ms"}}))
            ob.reconfigure(new.alerting)
            ob.reconfigure(new.alerting)
            wait_for(lambda: store.outbox_stats()[0] == 0, what="the row delivered once")
            ob.enqueue([("s", "k2", "firing", note(2))])  # the channel still has its (one) sender
            wait_for(lambda: store.outbox_stats()[0] == 0 and ob.counts[("s", "sent")] == 2, what="the next row")
            ob.stop(timeout=10.0)  # every sender has finished: nothing is still in flight
            assert rx.arrived == len(rx.requests) == 2, [r.headers["Idempotency-Key"] for r in rx.requests]
            assert [r.headers["Idempotency-Key"] for r in rx.requests] == ["k1", "k2"]
            assert not [t for t in threading.enumerate() if t.name == "send-s"]
        finally:
            ob.stop()


def test_a_dripping_receiver_holds_its_channel_no_longer_than_the_attempt_deadline(tmp_path):
    """The first answer drips a byte every 0.5 s (over a minute in all); the three notifications
    queued behind it are delivered once the 1 s attempt deadline ends that attempt."""
    with Receiver("slack") as rx:
        rx.script(Answer(200, "ok", drip=0.5))
        store, ob = outbox(tmp_path, [{"type": "slack", "name": "s", "url": rx.url, "attempt_timeout": "1s",
                                       "rate_limits": [{"count": 10, "per": "1s"}]}])
        ob.enqueue([("s", f"k{i}", "firing", note(i)) for i in range(1, 5)])
        ob.start()
        try:
            got = rx.wait_for(4, timeout=30)
            assert [r.headers["Idempotency-Key"] for r in got] == ["k1", "k2", "k3", "k4"]
            wait_for(lambda: ob.counts[("s", "sent")] == 4, what="four sent")
            assert ob.counts[("s", "retried")] == 1 and len(rx.requests) == 5
        finally:
            ob.stop()


def test_only_an_attempt_a_kill_interrupted_is_sent_again_marked(tmp_path):
    """Row k1: an earlier daemon began its attempt and died before recording the outcome. Row k2:
    its attempt failed and that was recorded (a retry, not a possible repeat). Only k1 is marked."""
    from watchdog.alerting.words.render import REPEAT_NOTICE

    with Receiver("slack") as rx:
        store, _ = outbox(tmp_path, [{"type": "slack", "name": "s", "url": rx.url}])
        store.enqueue([("s", "k1", "firing", note(1)), ("s", "k2", "firing", note(2))])
        k1 = store.next_due("s", time.time())
        store.begin_attempt(k1.id + 1)
        store.retry(k1.id + 1, time.time(), "HTTP 500")  # k2: a failed attempt, recorded
        store.begin_attempt(k1.id)  # k1: the request left; the daemon is killed before the verdict
        store.close()
        store, ob = outbox(tmp_path, [{"type": "slack", "name": "s", "url": rx.url}])  # the restart
        ob.start()
        try:
            got = rx.wait_for(2)
            seen = [(r.headers["Idempotency-Key"], REPEAT_NOTICE in r.text, r.json["text"].startswith("[CRITICAL]")) for r in got]
            assert seen == [("k1", True, False), ("k2", False, True)], seen  # the preview says it too
            wait_for(lambda: store.outbox_stats()[0] == 0, what="both delivered")
        finally:
            ob.stop()


def test_an_outbox_row_queued_by_an_older_version_is_sent_unmarked(tmp_path):
    """A state file from before attempts were recorded (no in_flight/repeat columns) opens, and
    its queued row is an ordinary one."""
    import json
    import sqlite3

    db = sqlite3.connect(str(tmp_path / "alerting.sqlite3"))
    db.executescript("""CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, channel TEXT NOT NULL,
        created REAL NOT NULL, ikey TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0, next_at REAL NOT NULL, last_error TEXT);""")
    db.execute("INSERT INTO outbox (channel, created, ikey, kind, body, attempts, next_at) VALUES (?,?,?,?,?,1,?)",
               ("s", time.time(), "k1", "firing", json.dumps(note(1)), time.time()))
    db.commit()
    db.close()
    store = AlertStore(str(tmp_path))
    assert store.interrupted_attempts() == 0
    row = store.next_due("s", time.time())
    assert (row.ikey, row.attempts, row.repeat) == ("k1", 1, False)


def test_an_idle_sender_sleeps_until_a_row_is_committed(tmp_path):
    """Counted: with nothing queued a sender waits for a wake (up to IDLE_WAIT), not a short
    poll; a committed row wakes it at once."""
    from watchdog.alerting.deliver import outbox as outbox_mod

    with Receiver("slack") as rx:
        store, ob = outbox(tmp_path, [{"type": "slack", "name": "s", "url": rx.url}])
        ob.start()
        try:
            worker = ob._workers["s"]
            waits = []
            real_wait = worker.wake.wait
            worker.wake.wait = lambda timeout=None: waits.append(timeout) or real_wait(timeout)
            worker.wake.set()  # one step with nothing queued
            wait_for(lambda: waits, what="the sender asleep")
            assert waits[-1] == outbox_mod.IDLE_WAIT
            ob.enqueue([("s", "k1", "firing", note(1))])
            rx.wait_for(1)
            wait_for(lambda: store.outbox_stats()[0] == 0, what="row removed after delivery")
        finally:
            ob.stop()


def test_an_attempt_whose_answer_never_came_makes_the_next_a_possible_repeat(tmp_path):
    """The request went out whole and the receiver answered after the read timeout (it may well
    have posted the message): the retry says it may be a repeat (the webhook's `possibleRepeat`,
    with the same Idempotency-Key). A receiver that was not listening at all got nothing, so the
    retry after a refused connection is not marked."""
    with Receiver("webhook") as rx:
        rx.script(Answer(200, {"ok": True}, delay=2.0))
        store, ob = outbox(tmp_path, [{"type": "webhook", "name": "w", "url": rx.url, "read_timeout": "500ms"}])
        ob.enqueue([("w", "k1", "firing", note(1))])
        ob.start()
        try:
            got = rx.wait_for(2, timeout=30, accepted=False)
            assert [r.headers["Idempotency-Key"] for r in got] == ["k1", "k1"]
            # (recorded when answered: the slow first answer may be recorded after the retry)
            assert sorted(r.json["possibleRepeat"] for r in got) == [False, True]
            wait_for(lambda: ob.counts[("w", "sent")] == 1, what="sent")
        finally:
            ob.stop()
    port = closed_port()
    store, ob = outbox(tmp_path / "refused", [{"type": "webhook", "name": "w", "url": f"http://127.0.0.1:{port}/hook"}])
    ob.enqueue([("w", "k2", "firing", note(2))])
    ob.start()
    try:
        wait_for(lambda: ob.counts[("w", "retried")] >= 1, what="a refused attempt")
        with Receiver("webhook", port=port) as rx:
            got = rx.wait_for(1, timeout=30)
            assert got[0].headers["Idempotency-Key"] == "k2" and got[0].json["possibleRepeat"] is False
    finally:
        ob.stop()


def test_a_failed_tls_handshake_never_sent_the_request() -> None:
    """The next attempt after a failed TLS handshake (a certificate, a protocol) is no repeat: the
    request never left. A connection cut after the request is one."""
    import ssl

    import requests
    from urllib3.exceptions import MaxRetryError, ProtocolError

    from watchdog.alerting.deliver.channels.base import _never_connected

    tls = requests.exceptions.SSLError(MaxRetryError(None, "/hook", reason=ssl.SSLError(1, "CERTIFICATE_VERIFY_FAILED")))
    assert _never_connected(tls)
    cut = requests.exceptions.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")))
    assert not _never_connected(cut)

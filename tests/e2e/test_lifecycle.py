"""End-to-end: the one-page promise across restarts, cascades, phases and npu-smi failures.

The real daemon on a simulated node (4 NPUs, the demo's time constants at speed 0.5), real webhook
receivers. Every case asserts the message counts per channel, firing and resolved: a fault gives
exactly one of each, a benign event none. Waits are bounded by detection budgets; nothing here
asserts a latency.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.helpers import wait_for

pytestmark = pytest.mark.slow

ONE_PAGE = {"timeline": {"firing": 1, "resolved": 1}, "oncall-slack": {"firing": 1, "resolved": 1}}
FIRING_ONLY = {"timeline": {"firing": 1, "resolved": 0}, "oncall-slack": {"firing": 1, "resolved": 0}}
NOTHING = {"timeline": {"firing": 0, "resolved": 0}, "oncall-slack": {"firing": 0, "resolved": 0}}


def alert_names(run, since, status="firing"):
    return sorted({a["labels"]["alertname"] for m in run.messages_since(since, status) for a in m["alerts"]})


def started(demo, **kw):
    run = demo(**kw)
    run.node.start_job()
    run.start_daemon()
    time.sleep(4)  # a few healthy rounds
    return run


def wait_page(run, t0, what, timeout=40):
    wait_for(lambda: run.messages_since(t0), timeout=timeout, what=what)


def wait_resolve(run, t0, what, timeout=60):
    wait_for(lambda: run.messages_since(t0, "resolved"), timeout=timeout, what=what)
    time.sleep(4)  # a second (wrong) message would have arrived by now


def restart_daemon(run, sig):
    # Let the page's delivery be recorded first: a SIGKILL between a send and its bookkeeping
    # redelivers it (at-least-once, same id), which is the outbox's business, not this test's.
    wait_for(lambda: all(c["firing"] for c in run.channel_counts(0).values()), timeout=20, what="page delivered")
    time.sleep(1.0)
    run.stop_daemon(sig)
    run.start_daemon()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_restart_during_a_firing_stall_neither_resolves_nor_repages(demo, sig):
    run = started(demo)
    t0 = time.time()
    run.node.set_mode("hang")
    wait_page(run, t0, "stall page")
    assert alert_names(run, t0) == ["stall"]
    restart_daemon(run, sig)
    time.sleep(15)  # longer than resolve_delay + the stall threshold: the detector re-evidences it
    assert run.channel_counts(t0) == FIRING_ONLY, run.channel_counts(t0)
    run.node.set_mode("train")
    wait_resolve(run, t0, "stall resolved")
    assert run.channel_counts(t0) == ONE_PAGE, run.channel_counts(t0)


def test_restart_during_a_firing_log_alert_keeps_its_hold(demo):
    run = started(demo, overrides={"probes": {"logs": dict(hold="30s")}})
    t0 = time.time()
    run.node.set_mode("nan")
    wait_page(run, t0, "NaN page")
    time.sleep(1)
    run.node.set_mode("train")  # the heartbeat clears; the log lines hold for 30 s
    restart_daemon(run, signal.SIGKILL)
    time.sleep(12)  # past resolve_delay and the log warm-up: a forgotten match would resolve now
    assert run.channel_counts(t0) == FIRING_ONLY, run.channel_counts(t0)
    wait_resolve(run, t0, "NaN resolved after its hold", timeout=60)
    assert run.channel_counts(t0) == ONE_PAGE, run.channel_counts(t0)


def test_oom_cascade_at_the_shipped_time_ratios_pages_once(demo):
    """hold 30m, cascade_window 10m and HCCL_EXEC_TIMEOUT 1836 s, all scaled by 1/60: the peers'
    HCCL errors arrive after the OOM's hold, while the dead rank is still gone."""
    k = 1 / 60
    hccl = 1836 * k
    run = started(demo, overrides={"probes": {"logs": dict(hold=f"{1800 * k:g}s", cascade_window=f"{600 * k:g}s")},
                                   "job": {"hccl_exec_timeout": f"{hccl:g}s"}})
    logs_cfg = run.config["probes"]["logs"]
    assert logs_cfg["hold"] == "30s" and logs_cfg["interval"]  # the demo's other log settings stay
    t0 = time.time()
    run.node.set_mode("peer_failed", {1: "oom"}, failed_rank=1, hccl_timeout_seconds=hccl)
    wait_page(run, t0, "OOM page")
    assert alert_names(run, t0) == ["log_oom"]
    time.sleep(hccl + 12)  # the peers time out in HCCL after the OOM's hold has run out
    assert run.channel_counts(t0) == FIRING_ONLY, (run.channel_counts(t0), alert_names(run, t0))
    run.restart_job()
    wait_resolve(run, t0, "OOM resolved after the job restarted")
    assert run.channel_counts(t0) == ONE_PAGE, (run.channel_counts(t0), alert_names(run, t0))


def test_checkpoint_on_rank_zero_only_pages_nobody(demo):
    run = started(demo)
    t0 = time.time()
    # Rank 0 saves for 25 s (its checkpoint threshold is 45 s); ranks 1-3 wait in a barrier,
    # writing nothing and still reporting `train` (threshold 10 s).
    run.node.set_mode("hang", {0: "checkpoint"})
    time.sleep(25)
    run.node.set_mode("train")
    time.sleep(8)
    assert run.channel_counts(t0) == NOTHING, (run.channel_counts(t0), alert_names(run, t0))


def test_nan_line_during_a_stall_is_not_progress(demo):
    run = started(demo)
    t0 = time.time()
    run.node.set_mode("hang")
    wait_page(run, t0, "stall page")
    with open(run.node.root / "logs" / "rank0.log", "a") as f:
        f.write("[rank 0] WARNING: loss is nan at iteration 812, grad norm nan; skipping update\n")
    time.sleep(12)  # several passes: no resolve, no second page
    assert run.channel_counts(t0) == FIRING_ONLY, (run.channel_counts(t0), alert_names(run, t0))
    run.node.set_mode("train")
    wait_resolve(run, t0, "stall resolved")
    assert run.channel_counts(t0) == ONE_PAGE, (run.channel_counts(t0), alert_names(run, t0))
    assert alert_names(run, t0) == ["stall"]


@pytest.mark.parametrize("behavior,rule", [("hang", "npu_smi_hung"), ("fail", "npu_smi_failing"),
                                           ("garbage", "npu_smi_failing")])
def test_npu_smi_failure_pages_once(demo, behavior, rule):
    # probe_down's `for` scaled like the rest, so a doubled page would show within the test.
    run = started(demo, overrides={"alerting": {"for": {"probe_down": "5s"}}})
    t0 = time.time()
    run.node.npu_behavior = behavior  # "fail" prints the `ret is -8020` text
    run.node.refresh()
    wait_page(run, t0, f"{rule} page")
    time.sleep(12)  # past probe_down's `for` and several rounds
    assert run.channel_counts(t0) == FIRING_ONLY, (run.channel_counts(t0), alert_names(run, t0))
    assert alert_names(run, t0) == [rule]
    run.node.npu_behavior = "ok"
    run.node.refresh()
    wait_resolve(run, t0, f"{rule} resolved")
    assert run.channel_counts(t0) == ONE_PAGE, (run.channel_counts(t0), alert_names(run, t0))


# -- a restart at any moment of one incident ------------------------------------------------------
REPEAT_WORDS = "may repeat a message already delivered"
NAN_RULES = ("loss_nan", "log_nan")


def delivered(run, t0):
    """channel -> [(status, message id, marked as a possible repeat)] of the messages since t0, in
    arrival order (reminders and refreshes left out)."""
    import json
    import re

    from watchdog.demo.receiver import plain_lines

    out = {"timeline": [], "oncall-slack": []}
    for r in list(run.receiver.received):
        if r.at < t0:
            continue
        if r.path.startswith("/hook"):
            if r.body.get("kind") in ("reminder", "refresh"):
                continue
            out["timeline"].append((r.body["status"], r.body["idempotencyKey"], bool(r.body.get("possibleRepeat"))))
        elif r.path.startswith("/slack"):
            text = json.dumps(r.body)
            status = "resolved" if "RESOLVED" in (plain_lines(r.body) or [""])[0] else "firing"
            ident = re.search(r"\bid ([0-9a-f]{20})\b", text)
            out["oncall-slack"].append((status, ident.group(1) if ident else None, REPEAT_WORDS in text))
    return out


def one_page_one_resolve(got):
    """Exactly one firing and one resolved message per channel; a second copy of a message (same
    id: a kill landed between a vendor's receipt and the daemon's bookkeeping) only as a marked
    repeat. Returns what is wrong ("" when the promise holds)."""
    wrong = []
    for channel, msgs in got.items():
        seen, counts = set(), {"firing": 0, "resolved": 0}
        for status, ident, marked in msgs:
            if ident in seen:
                if not marked:
                    wrong.append(f"{channel}: unmarked repeat of {ident}")
                continue
            seen.add(ident)
            counts[status] += 1
        if counts != {"firing": 1, "resolved": 1}:
            wrong.append(f"{channel}: {counts}")
    return "; ".join(wrong)


def nan_findings(run):
    """The NaN findings in force (raises while the daemon does not answer: not a phase)."""
    return [f for f in run.status()["findings"] if f["rule"] in NAN_RULES]


def outbox_empty(run):
    return "npu_watchdog_outbox_pending 0.0" in run.metrics_text()


#: Each kill point waits for a phase of the incident, seen from outside: the daemon's findings,
#: its outbox, what the receiver got. `before` runs once the NaN is injected, `after` once the
#: trainer is healthy again (the NaN line's hold still runs).
KILL_POINTS = {
    # the NaN is detected, its group window is open: nothing sent yet
    "pending": ("before", lambda run, t0: nan_findings(run) and not run.messages_since(t0)),
    # the first copy of the page has reached a vendor (the other channel may be mid-send)
    "paged": ("before", lambda run, t0: run.messages_since(t0)),
    # both channels have it and the outbox is empty: firing, nothing in flight
    "firing": ("before", lambda run, t0: all(c["firing"] for c in run.channel_counts(t0).values())
               and outbox_empty(run)),
    # the trainer is healthy and the NaN line's hold has run out (no finding left), but the
    # resolve_delay has not: the resolve is not sent yet
    "ended": ("after", lambda run, t0: not nan_findings(run) and not run.messages_since(t0, "resolved")),
    # the resolve went out on both channels and nothing is in flight
    "resolved": ("after", lambda run, t0: all(c["resolved"] for c in run.channel_counts(t0).values())
                 and outbox_empty(run)),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_sigkill_at_any_moment_of_an_incident_keeps_one_page_and_one_resolve(demo, point):
    """A NaN (heartbeat and log line, one event) from first sight to resolve, with the daemon
    SIGKILLed and restarted on its state folder at one moment of that life."""
    # Wider group window and resolve delay than the demo's: the phases between them stay open long
    # enough to be hit from outside on a loaded machine.
    run = started(demo, overrides={"alerting": {"group_window": "5s", "resolve_delay": "6s"}})
    when, reached = KILL_POINTS[point]
    t0 = time.time()
    run.node.set_mode("nan")

    def kill_when_reached():
        wait_for(lambda: reached(run, t0), timeout=60, interval=0.05, what=f"phase {point}")
        run.stop_daemon(signal.SIGKILL)
        run.start_daemon()

    if when == "before":
        kill_when_reached()
    wait_page(run, t0, "NaN page")
    wait_for(lambda: all(c["firing"] for c in run.channel_counts(t0).values()), timeout=30, what="page on both")
    time.sleep(1)
    run.node.set_mode("train")
    if when == "after":
        kill_when_reached()
    wait_resolve(run, t0, "NaN resolved", timeout=90)
    wait_for(lambda: all(c["resolved"] for c in run.channel_counts(t0).values()), timeout=30, what="resolve on both")
    time.sleep(8)  # past resolve_delay and the warm-ups: a second page or resolve would be here
    got = delivered(run, t0)
    assert not one_page_one_resolve(got), (one_page_one_resolve(got), got, alert_names(run, t0))
    assert set(alert_names(run, t0)) <= set(NAN_RULES), alert_names(run, t0)

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

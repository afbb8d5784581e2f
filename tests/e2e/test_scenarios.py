"""End-to-end: the real daemon on a simulated node; each fault pages once, benign events never.

The same machinery as `npu-watchdog demo`, with assertions (the standard demo sequence itself is
tests/e2e/test_demo_sequence.py). Waits are bounded by each fault's
detection budget (a test fails when nothing arrives in time); latencies are measured by the demo
and the benchmarks, not asserted here.
"""

from __future__ import annotations

import time

import pytest

from tests.helpers import REPO, wait_for

pytestmark = pytest.mark.slow


def firing(run, since):
    return run.messages_since(since, "firing")


def names(msg):
    return sorted({a["labels"]["alertname"] for a in msg["alerts"]})


# Lines that are near misses alone but count towards a repetition rule (overflow skips, skipped
# iterations): several of them together are a real finding, so they are left out of the pile.
_COUNTED = ("skipped iterations", "overflow", "skipping step", "reducing loss scale")


def _near_miss_lines():
    """Every line the shipped sample logs mark as a near miss (`##> -`), once each."""
    out = []
    for f in sorted((REPO / "tests" / "samples" / "logs").glob("*.log")):
        for line in f.read_text(errors="replace").splitlines():
            if line.rstrip().endswith("##> -"):
                text = line.rsplit("##>", 1)[0].rstrip()
                if text not in out and not any(c in text.lower() for c in _COUNTED):
                    out.append(text)
    assert len(out) >= 20
    return out


def test_benign_events_page_nobody(demo):
    run = demo()
    node = run.node
    node.start_job()
    run.start_daemon()
    t0 = time.time()
    time.sleep(6)
    # An eval and a checkpoint, each longer than the train heartbeat threshold (10 s at this speed).
    node.set_mode("eval")
    time.sleep(14)
    node.set_mode("train")
    time.sleep(4)
    node.set_mode("checkpoint")
    time.sleep(14)
    node.set_mode("train")
    time.sleep(3)
    # A log full of near misses, appended to a rank's training log and to a plog.
    lines = _near_miss_lines()
    with open(node.root / "logs" / "rank0.log", "a") as f:
        f.write("\n".join(lines) + "\n")
    plog = sorted((node.root / "plog").glob("plog-*.log"))[0]
    with open(plog, "a") as f:
        f.write("\n".join(lines) + "\n")
    time.sleep(4)
    # The job finishes cleanly: every rank writes phase done and exits 0.
    node.set_mode("done")
    wait_for(lambda: not node.rank_pids(), timeout=20, what="ranks exiting")
    assert node.launcher.wait(10) == 0
    time.sleep(8)
    msgs = firing(run, t0)
    # A clean end sends at most an info message (job_finished), never a page.
    ended = [a for m in msgs for a in m["alerts"] if a["labels"]["alertname"] == "job_finished"]
    others = [(a["labels"], a["annotations"]) for m in msgs for a in m["alerts"] if a not in ended]
    assert others == [] and len(ended) <= 1 and all(a["labels"]["severity"] == "info" for a in ended), (others, ended)
    assert [f for f in run.findings() if f["rule"] != "job_finished"] == [], run.findings()


def test_daemon_restart_mid_alert_neither_repages_nor_loses_the_resolve(demo):
    run = demo()
    node = run.node
    node.start_job()
    run.start_daemon()
    time.sleep(4)
    t0 = time.time()
    node.set_device(2, gone=True)
    wait_for(lambda: firing(run, t0), timeout=30, what="npu_missing alert")
    assert run.stop_daemon() == 0
    run.start_daemon()
    time.sleep(8)  # several rounds and engine passes with the card still gone
    assert len(firing(run, t0)) == 1, [names(m) for m in firing(run, t0)]
    node.clear_devices()
    wait_for(lambda: run.messages_since(t0, "resolved"), timeout=30, what="resolved message")
    time.sleep(3)
    (resolved,) = run.messages_since(t0, "resolved")
    assert names(resolved) == ["npu_missing"] and resolved["alerts"][0]["labels"]["npu"] == "2"
    assert len(firing(run, t0)) == 1


def test_webhook_down_for_a_while_delivers_everything_once_in_order(demo):
    run = demo(overrides={"alerting": {"retry_initial": "1s", "retry_max": "2s"}})
    node = run.node
    node.start_job()
    run.start_daemon()
    time.sleep(4)
    t0 = time.time()
    run.receiver_down()
    node.set_device(1, gone=True)
    wait_for(lambda: any(f["rule"] == "npu_missing" for f in run.findings()), timeout=30, what="npu_missing")
    time.sleep(3)
    node.clear_devices()  # fires, then resolves, while the endpoint is down
    wait_for(lambda: not any(f["rule"] == "npu_missing" for f in run.findings()), timeout=30, what="clear")
    time.sleep(4)
    node.kill_rank(3)
    wait_for(lambda: any(f["rule"] == "rank_missing" for f in run.findings()), timeout=30, what="rank_missing")
    time.sleep(4)
    assert run.receiver.hooks() == [] or all(r.at < t0 for r in run.receiver.hooks())
    run.receiver_up()
    wait_for(lambda: len([r for r in run.receiver.hooks() if r.at >= t0]) >= 3, timeout=60,
             what="three messages after the endpoint returned")
    time.sleep(5)
    got = [r.body for r in run.receiver.hooks() if r.at >= t0]
    seq = [(m["status"], names(m)) for m in got]
    assert seq == [("firing", ["npu_missing"]), ("resolved", ["npu_missing"]), ("firing", ["rank_missing"])], seq
    keys = [m["idempotencyKey"] for m in got]
    assert len(keys) == len(set(keys))

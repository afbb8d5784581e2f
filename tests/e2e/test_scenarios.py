"""End-to-end: the real daemon on a simulated node; each fault pages once, benign events never.

The same machinery as `npu-watchdog demo`, with assertions. Waits are bounded by each fault's
detection budget (a test fails when nothing arrives in time); latencies are measured by the demo
and the benchmarks, not asserted here.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.golden_kit import golden_diff, message_counts, metrics_shape
from tests.helpers import REPO, duplicate_series, wait_for
from watchdog.config.load import load_config_text
from watchdog.demo.scenario import state_dir

pytestmark = pytest.mark.slow


def firing(run, since):
    return run.messages_since(since, "firing")


def names(msg):
    return sorted({a["labels"]["alertname"] for a in msg["alerts"]})


def test_every_fault_pages_exactly_once(demo):
    run = demo()
    results = {r.name.split(":")[0].split(" (")[0]: r for r in run.play()}
    assert all(r.ok for r in results.values()), [(r.name, r.messages, r.delivered_at) for r in results.values()]
    metrics = run.metrics_text()
    assert not duplicate_series(metrics)  # a launcher, wrapper or worker never doubles a rank
    # The zero-config path: the shipped example (its discovery feeds every probe), no job name,
    # no probe enabled with explicit selectors or paths, npu-smi found on PATH.
    assert "job" not in run.config and "paths" not in run.config
    assert not any(sec.get("enabled") for name, sec in run.config["probes"].items()
                   if isinstance(sec, dict) and name != "kernel")  # (the kernel log is this machine's)
    assert "npu_smi" not in run.config["probes"]["npu"] or run.config["probes"]["npu"]["npu_smi"] == "npu-smi"
    cfg = load_config_text(run.config_path.read_text())
    assert set(cfg.feeds.values()) == {"discovery"} and not cfg.job_name_explicit
    # Nothing names a job that does not exist: every alert and every series is llama-demo's or the node's.
    sent = [a for r in run.receiver.hooks() for a in r.body.get("alerts", [])]
    assert sent and {a["labels"].get("training_job") for a in sent} <= {"llama-demo", None}
    assert 'training_job="training"' not in metrics and 'training_job="llama-demo"' in metrics
    for benign in ("healthy training", "long checkpoint", "training resumes after the checkpoint"):
        assert results[benign].messages == 0, benign

    hang = results["HCCL hang"]
    assert hang.messages == 1
    (alert,) = hang.alerts
    assert alert["labels"]["alertname"] == "stall" and alert["labels"]["training_job"] == "llama-demo"
    assert alert["labels"]["host"] == "demo-node-01"
    assert "collective_hang" in alert["annotations"]["summary"]
    assert "Entry-" in alert["annotations"]["hint"]
    assert Path(alert["annotations"]["snapshot"]).parent == state_dir(run.out) / "snapshots"

    assert results["recovery"].resolved == 1 and results["recovery"].messages == 0

    nan = results["NaN loss on every rank"]
    assert nan.messages == 1, [(a["labels"]["alertname"], a["labels"].get("rank")) for a in nan.alerts]
    # One divergence, whichever probe saw it first: loss_nan (heartbeat) or log_nan (log line).
    assert len({a["labels"]["alertname"] for a in nan.alerts}) == 1
    assert {a["labels"]["alertname"] for a in nan.alerts} <= {"loss_nan", "log_nan"}
    for step in (nan, results["NPU out of memory on rank 3"], results["card lost"]):
        assert step.channels == {"timeline": {"firing": 1, "resolved": 1},
                                 "oncall-slack": {"firing": 1, "resolved": 1}}, (step.name, step.channels)

    oom = results["NPU out of memory on rank 3"]
    assert oom.messages == 1, oom.alerts
    rules = {a["labels"]["alertname"] for a in oom.alerts}
    assert "log_oom" in rules and not rules & {"log_hccl", "stall", "heartbeat_stale", "rank_missing"}, rules
    assert any(a["labels"].get("rank") == "3" for a in oom.alerts if a["labels"]["alertname"] == "log_oom")
    assert all(a["annotations"].get("snapshot") for a in oom.alerts if a["labels"]["severity"] == "critical"), \
        [(a["labels"], a["annotations"].get("snapshot")) for a in oom.alerts]

    card = results["card lost"]
    assert card.messages == 1 and names({"alerts": card.alerts}) == ["npu_missing"]
    assert card.alerts[0]["labels"]["npu"] == "5" if run.node.npus > 5 else card.alerts[0]["labels"]["npu"] == "2"

    crash = results["rank crash"]
    assert crash.messages == 1 and names({"alerts": crash.alerts}) == ["rank_missing"]
    assert crash.alerts[0]["labels"]["rank"] == ("6" if run.node.npus > 6 else "3")
    snaps = list((state_dir(run.out) / "snapshots").glob("*.tar.gz"))
    assert snaps and all(p.stat().st_mode & 0o077 == 0 for p in snaps)

    # Behaviour goldens (tests/golden_kit.py; regenerate with `make golden`): the messages per step
    # and channel, and /metrics apart from values (names, TYPE, HELP, label sets).
    counts = golden_diff("demo_messages.json", message_counts(results.values()))
    assert not counts, counts
    shape = golden_diff("demo_metrics.txt", metrics_shape(metrics))
    assert not shape, shape


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

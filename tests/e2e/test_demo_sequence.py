"""End-to-end: the standard demo sequence (`npu-watchdog demo`) against the real daemon, run once
and shared by the tests that only read what it sent (`played`; the run takes about 100 s).

Each fault pages exactly once per channel and resolves once, benign steps page nobody, and the
behaviour goldens hold (tests/golden_kit.py: the message counts per step and channel, /metrics apart
from values). What the on-call person reads is right and every link of every message works: it
answers 200 with its anchor on the page, served by the node itself (no network beyond it). The NaN
message names the first NaN iteration the ranks logged, not a later one. Waits are bounded by each
fault's detection budget; latencies are measured by the demo and the benchmarks, not asserted here.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

from tests.golden_kit import golden_diff, message_counts, metrics_shape
from tests.helpers import check_link, demo_run, duplicate_series, message_links
from watchdog.config.load import load_config_text
from watchdog.demo.scenario import state_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """One run of the standard demo sequence, shared by the tests that only read what it sent;
    the daemon stays up (its links are followed) until the module ends."""
    run = demo_run(tmp_path_factory.mktemp("played") / "run0")
    try:
        results = {r.name.split(":")[0].split(" (")[0]: r for r in run.play()}
        yield run, results
    finally:
        run.close()


def names(msg):
    return sorted({a["labels"]["alertname"] for a in msg["alerts"]})


def test_every_fault_pages_exactly_once(played):
    run, results = played
    assert all(r.ok for r in results.values()), [
        (r.name, r.expect, r.messages, r.resolved, r.channels, r.delivered_at) for r in results.values() if not r.ok]
    metrics = run.metrics_text()
    assert not duplicate_series(metrics)  # a launcher, wrapper or worker never doubles a rank
    # The zero-config path: the shipped example (its discovery feeds every probe), no job name,
    # no probe enabled with explicit selectors or paths, npu-smi found on PATH.
    assert "job" not in run.config and "paths" not in run.config
    assert not any(sec.get("enabled") for name, sec in run.config["probes"].items()
                   if isinstance(sec, dict) and name not in ("kernel", "links", "subhealth"))
    # (the kernel log, the NPUs' ports and their sub-health are this machine's: no selector or path)
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


def _first_nan_iteration(run) -> int:
    firsts = []
    for log in sorted((run.node.root / "logs").glob("rank*.log")):
        m = re.search(r"loss is nan at iteration (\d+)", log.read_text(errors="replace"))
        if m:
            firsts.append(int(m.group(1)))
    assert firsts, "no rank logged a NaN"
    return min(firsts)


def test_every_link_of_every_demo_message_answers_with_its_anchor_and_nan_names_the_first_iteration(played):
    run, results = played
    bodies = [r.body for r in run.receiver.received]
    assert len(bodies) >= 8, len(bodies)
    links = [u for b in bodies for u in message_links(b)]
    assert links, "the demo's messages carry no link at all"
    hosts = {urllib.parse.urlsplit(u).hostname for u in links}
    assert hosts == {"127.0.0.1"}, f"links leave the node: {sorted(hosts)}"
    rules = {r for b in bodies for r in re.findall(r"/runbook/en#([a-z_]+)", str(b))}
    assert {"stall", "log_oom", "npu_missing", "rank_missing"} <= rules, rules
    assert [check_link(u) for u in links] == [None] * len(links)

    nan = results["NaN loss on every rank"]
    first = _first_nan_iteration(run)
    titles = [r.body["blocks"][0]["text"]["text"] for r in run.receiver.slack_since(nan.injected_at)
              if "NaN loss" in r.body["blocks"][0]["text"]["text"]]
    # The heartbeat and the log line say the same number in their own words: when the heartbeat's
    # NaN is read before the log probe's first match, the firing title says "step 34", the
    # resolved one (the log match known by then) "iteration 34". The number is what on-call needs.
    assert titles and all(re.search(rf"\b(?:iteration|step) {first} ", t) for t in titles), (first, titles)

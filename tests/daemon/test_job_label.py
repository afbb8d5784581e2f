"""The training job is labelled `training_job`, never `job` (Prometheus's scrape-target label):
on every served series, and across an upgrade from state, silences and configs that said `job`."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import List

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.receivers import Receiver
from tests.helpers import TESTS, wait_for
from tests.alertkit import open_engine
from tests.liveness_kit import Children
from watchdog.alerting.engine import AlertEngine
from watchdog.alerting.decide.links import dashboard_link
from watchdog.alerting.deliver.store import AlertStore
from watchdog.config.load import load_config_text
from watchdog.config.sections.alerting import parse_matcher
from watchdog.core.findings import JOB_LABEL, Finding
from watchdog.metrics.catalog import TARGET_LABELS, MetricDef, all_metrics

HERE = TESTS
FAKE_NPU_SMI = HERE / "fakes" / "npu-smi"
OLD = {"host": "node-a", "job": "job-a"}  # what a version before the rename put on findings
NEW = {"host": "node-a", "training_job": "job-a"}


def test_no_metric_declares_a_target_label():
    assert not [d.name for d in all_metrics() if set(d.labels) & set(TARGET_LABELS)]
    with pytest.raises(ValueError, match="training_job"):
        MetricDef("npu_watchdog_x", "gauge", ("job",), "x")
    with pytest.raises(ValueError, match="instance"):
        MetricDef("npu_watchdog_y", "gauge", ("instance", "npu"), "y")


def test_running_daemon_serves_no_job_or_instance_label(make_daemon, tmp_path):
    """Every probe on, so that the per-NPU, per-rank, log, alert and probe families have samples."""
    kids = Children()
    try:
        hb = tmp_path / "hb"
        hb.mkdir()
        kids.writer(hb / "rank0.json", "healthy", rank=0)
        kids.writer(hb / "rank1.json", "healthy_samples", rank=1)  # throughput in samples/s
        logs = tmp_path / "logs"
        logs.mkdir()
        (logs / "train.log").write_text("")
        scen = tmp_path / "scenario.json"
        scen.write_text(json.dumps({"generate": {"npus": 8},
                                    "processes": [{"npu": 0, "chip": 0, "pid": 4242, "name": "python", "memory_mb": 900}]}))
        d = make_daemon({"probes": {
            "jitter": "0s",
            "npu": {"enabled": True, "interval": "1s", "npu_smi": str(FAKE_NPU_SMI), "command_timeout": "2s"},
            "process": {"enabled": True, "interval": "0.5s", "cmdline": kids.marker, "expected": 2},
            "heartbeat": {"enabled": True, "interval": "0.5s", "paths": [str(hb / "rank*.json")]},
            "logs": {"enabled": True, "interval": "1s", "sources": [{"name": "train", "paths": [str(logs / "*.log")]}]},
            "commands": [{"name": "bad", "argv": ["/bin/false"], "interval": "1s", "timeout": "2s"}],
        }}, env={"FAKE_NPU_SMI_SCENARIO": str(scen)})

        def everything_reported():
            m = d.metrics()
            keys = ("npu_watchdog_npu_hbm_used_bytes{", 'npu_watchdog_job_ranks_alive{training_job="job-t"}',
                    'npu_watchdog_heartbeat_step{rank="0",training_job="job-t"}',
                    'npu_watchdog_alerts_firing{rule="command_check"')
            missing = [p for p in keys if not any(k.startswith(p) for k in m)]
            if missing:
                raise AssertionError(f"not yet served: {missing}")
            return m
        wait_for(everything_reported, timeout=60, what="npu, liveness and alert series")
        families = list(text_string_to_metric_families(d.metrics_text()))
    finally:
        kids.close()
    samples = [s for fam in families for s in fam.samples]
    assert len({s.name for s in samples}) >= 30, "too few families with samples to mean anything"
    bad = sorted({s.name for s in samples if set(s.labels) & set(TARGET_LABELS)})
    assert not bad, f"series with a Prometheus target label: {bad}"
    with_job = {s.name for s in samples if s.labels.get(JOB_LABEL) == "job-t"}
    # npu_watchdog_discovered_ranks is served only with discovery on (its label: test_discovery_daemon);
    # a job's step time, its baseline, the slowdown and the goodput are served once its progress
    # lines give a step time (a made-up 0 would read as an infinitely fast job; their label: test_pace_shipped_config).
    unserved = {"npu_watchdog_discovered_ranks", "npu_watchdog_job_step_seconds",
                "npu_watchdog_job_step_baseline_seconds", "npu_watchdog_job_slowdown_ratio",
                "npu_watchdog_job_goodput_ratio"}
    declared = {d.name for d in all_metrics() if JOB_LABEL in d.labels} - unserved
    assert declared and declared <= with_job, sorted(declared - with_job)


# -- upgrade: old state, old silences, old configs ----------------------------------------------


def make_config(tmp_path: Path, url: str, **alerting) -> object:
    al = {"group_window": "1s", "resolve_delay": "1s", "reminder": "0s",
          "channels": [{"type": "webhook", "name": "hook", "url": url, "min_severity": "info"}]}
    al.update(alerting)
    return load_config_text(yaml.safe_dump({"paths": {"state_dir": str(tmp_path / "state")}, "alerting": al}))


def finding(rule: str, labels: dict, sev: str = "critical", **more: str) -> Finding:
    return Finding(rule=rule, severity=sev, summary=f"{rule} test", labels={**labels, **more},
                   hint="check it", since=time.time() - 60)


def hold(engine: AlertEngine, findings: List[Finding], seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        engine.process(findings, time.time())
        time.sleep(0.2)


@pytest.fixture
def rx():
    with Receiver("webhook") as r:
        yield r


def test_upgrade_keeps_an_alert_firing_under_the_new_label(tmp_path, rx):
    """An alert that fired as `job=...` before the upgrade is the same alert after it: no resolved
    message for the old one and no second page for the new one; it resolves once, relabelled."""
    cfg = make_config(tmp_path, rx.url)
    old = open_engine(cfg, timer=True)
    try:
        hold(old, [finding("job_gone", OLD)], 1.5)
        rx.wait_for(1)
    finally:
        old.close()
    new = open_engine(cfg, timer=True)
    try:
        (row,) = new.alert_states()
        assert row.state == "firing" and row.labels == NEW
        hold(new, [finding("job_gone", NEW)], 2.0)  # longer than resolve_delay + group_window
        # Restored alerts are held until their detector has warmed up again (see the restart rule
        # in docs/alerting.md): let the probes complete a round, then move past the warm-up.
        new.round_complete()
        from watchdog.core.rulecatalog import warmup
        later = time.time() + warmup("job_gone", cfg, row.finding) + 1.0
        new.process([], later)
        new.process([], later + cfg.alerting.resolve_delay + 1.0)
        msgs = rx.wait_for(2)
        time.sleep(1.0)
    finally:
        new.close()
    msgs = rx.accepted()
    assert [(m.json["status"], len(m.json["alerts"])) for m in msgs] == [("firing", 1), ("resolved", 1)]
    assert msgs[1].json["alerts"][0]["labels"] == {"alertname": "job_gone", "severity": "critical", **NEW}
    assert msgs[1].json["groupLabels"] == NEW


def test_outbox_entry_queued_before_the_upgrade_goes_out_relabelled(tmp_path, rx):
    cfg = make_config(tmp_path, rx.url)
    store = AlertStore(cfg.paths.state_dir)
    alert = {"rule": "stall", "severity": "critical", "summary": "stalled", "labels": OLD, "fp": "x"}
    store.enqueue([("hook", "old-1", "firing", {"kind": "firing", "status": "firing", "ikey": "old-1",
                                                "group": OLD, "alerts": [alert]})])
    store.close()
    e = open_engine(cfg, timer=True)
    try:
        (msg,) = rx.wait_for(1)
    finally:
        e.close()
    assert msg.json["alerts"][0]["labels"][JOB_LABEL] == "job-a" and "job" not in msg.json["alerts"][0]["labels"]
    assert msg.json["groupLabels"] == NEW and "node-a/job-a" in msg.json["title"]


def test_legacy_job_matcher_and_inhibition_equal_still_work(tmp_path, rx, caplog):
    caplog.set_level(logging.WARNING, logger="watchdog.config")
    cfg = make_config(tmp_path, rx.url, inhibitions=[
        {"source": ["npu_missing"], "target": ["stall", "log_hccl"], "equal": ["host", "job"]}])
    assert cfg.alerting.inhibitions[0].equal == ["host", JOB_LABEL]
    assert "`job` is now `training_job`" in caplog.text
    store = AlertStore(cfg.paths.state_dir)
    now = time.time()
    store.add_silence(["rule=log_hccl", "job=job-a"], now, now + 3600, "tester", "from before the rename")
    store.close()
    e = open_engine(cfg, timer=True)
    try:
        other = {"host": "node-a", JOB_LABEL: "job-b"}
        # npu_missing of another training job inhibits nothing of job-a; the old silence mutes log_hccl.
        hold(e, [finding("npu_missing", other, npu="3"), finding("stall", NEW),
                 finding("log_hccl", NEW, log_rule="hccl_timeout")], 1.8)
        msgs = rx.wait_for(2)
        time.sleep(0.5)
        sent = sorted((a["labels"]["alertname"], a["labels"][JOB_LABEL]) for m in rx.accepted() for a in m.json["alerts"])
        states = {a.rule: a.muted for a in e.alert_states()}
    finally:
        e.close()
    assert len(msgs) == 2 and sent == [("npu_missing", "job-b"), ("stall", "job-a")]
    assert states["log_hccl"] and states["log_hccl"].startswith("silenced:")


def test_legacy_names_in_matchers_and_dashboard_links():
    assert str(parse_matcher("job=~llama.*")) == "training_job=~llama.*"
    assert str(parse_matcher("rank=1")) == "rank=1"
    link = dashboard_link("https://g.example/d/x?var-training_job={training_job}&old={job}", NEW, "stall")
    assert link == "https://g.example/d/x?var-training_job=job-a&old=job-a"


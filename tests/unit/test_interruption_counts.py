"""`npu_watchdog_interruptions_total` is counted by the alert engine's core in the pass that
decides an alert fires (once per firing episode), rolled back with a pass whose commit failed,
committed with the alert state and read back after a restart; the metrics module only reads it."""

from __future__ import annotations

from typing import Sequence

from tests.alertkit import BASE, make_config
from watchdog.alerting.deliver.channels import build_channels
from watchdog.alerting.decide.core import EngineCore, PassResult
from watchdog.alerting.decide.muting import ActiveSilences
from watchdog.alerting.deliver.store import AlertStore
from watchdog.core.findings import Finding
from watchdog.detectors import with_verdict

URL = "http://127.0.0.1:9/hook"  # never contacted: the core only routes
T0 = 1_800_000_000.0


def oom(sev: str = "critical") -> Finding:
    return with_verdict(Finding(rule="log_oom", severity=sev, summary="NPU out of memory",
                                labels={**BASE, "log_rule": "oom_cuda"}))


class Core:
    def __init__(self, tmp_path, interruptions=None) -> None:
        self.cfg = make_config(tmp_path, URL, group_window="0s", resolve_delay="1s").alerting
        self.core = EngineCore(self.cfg, {}, interruptions)
        self.channels = list(build_channels(self.cfg).values())

    def run(self, findings: Sequence[Finding], now: float) -> PassResult:
        self.core.see(findings)
        tr = self.core.advance(now, observe=True)
        return self.core.settle(now, tr, ActiveSilences(), self.channels)


def test_an_alert_with_a_verdict_counts_once_per_firing_episode(tmp_path):
    c = Core(tmp_path)
    first = c.run([oom()], T0)
    assert [n.kind for n in first.notifications] == ["firing"]
    assert first.interruptions == ((("memory", "oom_cuda"), 1),)
    assert c.core.interruptions == {("memory", "oom_cuda"): 1}
    for i in range(1, 4):  # still firing: the same episode
        assert c.run([oom()], T0 + i).interruptions == ()
    gone = [c.run([], T0 + 5 + i) for i in range(3)]  # resolves, its row is deleted
    assert any(n.kind == "resolved" for r in gone for n in r.notifications)
    assert c.run([oom()], T0 + 20).interruptions == ((("memory", "oom_cuda"), 1),)  # a new episode
    assert c.core.interruptions == {("memory", "oom_cuda"): 2}


def test_a_warning_that_escalates_is_one_episode(tmp_path):
    c = Core(tmp_path)
    assert c.run([oom("warning")], T0).interruptions == ((("memory", "oom_cuda"), 1),)
    escalated = c.run([oom("critical")], T0 + 1)
    assert [n.kind for n in escalated.notifications] == ["firing"] and escalated.interruptions == ()
    assert c.core.interruptions == {("memory", "oom_cuda"): 1}


def test_alerts_without_a_verdict_are_not_interruptions(tmp_path):
    c = Core(tmp_path)
    stall = with_verdict(Finding(rule="stall", severity="critical", summary="no progress", labels=dict(BASE)))
    result = c.run([stall], T0)
    assert [n.kind for n in result.notifications] == ["firing"]
    assert result.interruptions == () and c.core.interruptions == {}


def test_a_rolled_back_pass_takes_its_counts_back(tmp_path):
    c = Core(tmp_path)
    saved = c.core.savepoint()
    assert c.run([oom()], T0).interruptions  # its commit "failed":
    c.core.rollback(saved)
    assert c.core.interruptions == {}
    assert c.run([oom()], T0 + 2).interruptions == ((("memory", "oom_cuda"), 1),)
    assert c.core.interruptions == {("memory", "oom_cuda"): 1}


def test_the_counts_are_committed_with_the_alerts_and_read_back(tmp_path):
    store = AlertStore(str(tmp_path / "state"))
    c = Core(tmp_path, store.load_interruptions())
    r = c.run([oom()], T0)
    store.commit_alerts(r.changed, r.deleted, r.items, interruptions=dict(r.interruptions))
    store.close()
    again = AlertStore(str(tmp_path / "state"))
    assert again.load_interruptions() == {("memory", "oom_cuda"): 1}
    # Added, not replaced: a database opened late keeps what it held.
    again.commit_alerts([], [], [], interruptions={("memory", "oom_cuda"): 2, ("unknown", "job_gone"): 1})
    assert again.load_interruptions() == {("memory", "oom_cuda"): 3, ("unknown", "job_gone"): 1}
    restored = Core(tmp_path, again.load_interruptions())
    assert restored.core.interruptions[("memory", "oom_cuda")] == 3
    again.close()

"""Exit statuses on the shipped example config, with real rank process trees under launchers
that report (or do not report) a failed rank as mpirun and DeepSpeed's launcher do, a fake
npu-smi whose table follows the ranks, and a real HTTP receiver per shipped channel (Feishu:
warning and up; the ops webhook: critical). Counts the messages per channel and the labels of
what was sent, and reads the finding the daemon holds.
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode, write_scenario

pytestmark = pytest.mark.slow
PAGE_BUDGET_S = 90


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = ShippedNode(tmp_path_factory.mktemp("exits"))
    try:
        wait_for(lambda: n.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        yield n
    finally:
        n.stop()


def _feishu_text(node) -> str:
    """Every Feishu message since the row began, as its JSON text (Chinese as it is)."""
    return " ".join(json.dumps(r.json, ensure_ascii=False) for r in node.messages()["feishu"])


def test_mpirun_signal_9_report_pages_once_naming_rank_6_killed_not_oom(node):
    """Rank 6 of 8 gets SIGKILL (nothing in the kernel log); mpirun writes `mpirun noticed that
    process rank 6 ... exited on signal 9 (Killed).` to its output file and tears the others down."""
    name = "mpi-kill"
    job = node.job(name, ranks=8, flavor="mpirun", FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        victim = job.rank_pids()[6]
        os.kill(victim, signal.SIGKILL)
        job.proc.wait(30)
        assert "rank 6 with PID" in (job.root / "launcher.log").read_text()
        write_scenario(node.scenario, [])
        (gone,) = wait_for(lambda: node.findings(name, "job_gone") or None, timeout=PAGE_BUDGET_S, what="job_gone")
        wait_for(lambda: node.counts()["hook"]["firing"] >= 1, timeout=PAGE_BUDGET_S, what="the page")
        time.sleep(8)  # a process round and a group window more: nothing may follow
        counts = node.counts()
        assert counts["hook"] == {"firing": 1, "resolved": 0} and counts["feishu"] == 1, node.messages()
        sent = str(node.messages())
        assert "rank 6 killed (signal 9)" in sent and "rank 6 killed (signal 9)" in gone["summary"], gone
        # Not filed as OOM: no OOM alert, and no OOM claim in the summary (the hint may still say
        # where an OOM kill would show: `dmesg`).
        for oom in ("OOM", "out of memory", "Out of memory"):
            assert oom not in gone["summary"], (oom, gone["summary"])
        assert "log_oom" not in sent and "kernel_oom" not in sent
        # The Chinese Feishu group reads the same facts (the rule's template plus the report).
        assert "rank 6 被杀死（信号 9）" in _feishu_text(node), _feishu_text(node)
        assert [a["alertname"] for a in node.hook_alerts()] == ["job_gone"]
        assert gone["details"]["verdict"]["row"] == "failure_line"
        assert gone["details"]["exit_report"]["rank"] == "6" and gone["details"]["exit_report"]["signal"] == 9
        assert node.findings(name, "log_oom") == []


def test_deepspeed_silent_exit_pages_once_naming_the_rank_and_its_exit_status(node):
    """Rank 1 of 4 exits 1 without a word; the DeepSpeed-like launcher tears the others down
    (SIGTERM) and exits 1, printing nothing anywhere the daemon reads. The kernel's process events
    give the statuses (the daemon runs as root here): a failure naming the first to go, once."""
    if os.geteuid() != 0:
        pytest.skip("the kernel's process events need root")
    name = "ds-silent"
    job = node.job(name, ranks=4, flavor="deepspeed", quiet=True, FAKE_TRAIN_NO_DONE="1", FAKE_TRAIN_QUIET_END="1")
    with job:
        node.follow(job, name)
        node.start_row()
        victim = job.rank_pids()[1]
        job.exit_rank(1)
        assert job.proc.wait(30) == 1
        assert "return code" not in (job.root / "launcher.log").read_text()  # not a word anywhere
        write_scenario(node.scenario, [])
        (gone,) = wait_for(lambda: node.findings(name, "job_gone") or None, timeout=PAGE_BUDGET_S, what="job_gone")
        wait_for(lambda: node.counts()["hook"]["firing"] >= 1, timeout=PAGE_BUDGET_S, what="the page")
        time.sleep(8)  # a process round and a group window more: nothing may follow
        counts = node.counts()
        assert counts["hook"] == {"firing": 1, "resolved": 0} and counts["feishu"] == 1, node.messages()
        said = f"rank 1 (pid {victim}) exit status 1"
        assert said in gone["summary"] and said in str(node.messages()), gone
        assert f"rank 1（pid {victim}）退出码 1" in _feishu_text(node), _feishu_text(node)
        assert gone["details"]["verdict"]["row"] == "exit_status"
        assert gone["details"]["evidence"]["exit_source"] == "process events"
        assert [a["alertname"] for a in node.hook_alerts()] == ["job_gone"]
        assert node.findings(name, "job_finished") == []


def test_a_zombie_rank_pages_at_once_as_gone_naming_its_exit_status(node):
    """Rank 1 of 2 exits 1 without a word under a launcher that never reaps it (a zombie) while
    rank 0 trains on. The kernel's process events report the exit with its status at once, so it
    is a rank gone (`rank_missing`, naming `exit status 1`), paged once, not only a `rank_zombie`
    with no status after `zombie_after` (which is then the same event, folded into it). Last in
    this file: its job is killed at the end and its `job_gone` may follow."""
    if os.geteuid() != 0:
        pytest.skip("the kernel's process events need root")
    name = "zombie-exit"
    job = node.job(name, ranks=2, no_reap=True, FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        victim = job.rank_pids()[1]
        job.exit_rank(1)
        wait_for(lambda: psutil.Process(victim).status() == psutil.STATUS_ZOMBIE, timeout=30, what="the zombie")
        (missing,) = wait_for(lambda: node.findings(name, "rank_missing") or None, timeout=PAGE_BUDGET_S,
                              what="rank_missing")
        wait_for(lambda: node.counts()["hook"]["firing"] >= 1, timeout=PAGE_BUDGET_S, what="the page")
        # past zombie_after (30 s on the shipped config) and a group window: nothing may follow
        time.sleep(40)
        counts = node.counts()
        assert counts["hook"] == {"firing": 1, "resolved": 0} and counts["feishu"] == 1, node.messages()
        assert [(a["alertname"], a["rank"]) for a in node.hook_alerts()] == [("rank_missing", "1")]
        said = f"rank 1 (pid {victim}) exited (exit status 1)"
        assert said in missing["summary"] and said in str(node.messages()), missing
        assert psutil.Process(victim).status() == psutil.STATUS_ZOMBIE  # still not reaped

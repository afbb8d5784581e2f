"""Issue "zero-config" (a clean end is not a failure): each row of the clean-end decision table
(docs/discovery.md) with real rank process trees under a torchrun-like launcher, the daemon on
the shipped example config (zero-config discovery, unedited), a fake npu-smi whose process table
follows the ranks (HBM freed when they go), and a real HTTP receiver per shipped channel (Feishu:
warning and up; the ops webhook: critical). Each row counts the messages per channel and checks
the labels of what was sent, and the finding the daemon holds (`/api/status`).

The rows share one daemon (its start-up is the slow part) and run in file order, each with its
own job (own name, own launcher port), counting only the messages received during the row.
The kernel-kill row needs the kernel probe; it is unit-tested (tests/test_job_end.py) until then.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Dict

import pytest

from tests.helpers import REPO, wait_for
from tests.jobkit import ShippedNode, TrainJob, write_scenario

pytestmark = pytest.mark.slow
SHIPPED = REPO / "config" / "npu-watchdog.example.yaml"
#: The shipped process probe reads every 10 s, the logs probe every 3 s; a page also waits for
#: the group window. Generous: the machine is shared.
PAGE_BUDGET_S = 90
#: The shipped `discovery.end_window`.
END_WINDOW_S = 30


#: The rows' shared node: the shipped-config daemon, its receivers and fake npu-smi (the kit's).
Node = ShippedNode


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("jobend"))
    try:
        wait_for(lambda: n.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        yield n
    finally:
        n.stop()


def ended_cleanly(node: Node, job: TrainJob, name: str, row: str) -> Dict:
    """The ranks leave; the daemon holds an info `job_finished` of that row; nothing is sent."""
    assert job.wait() == 0
    write_scenario(node.scenario, [])  # HBM freed, chips idle
    # The launcher's line may come a moment after the last rank left: the probe looks again a
    # round later, so the row may turn from left_together to end_line, never to a failure.
    wait_for(lambda: [f["value"] for f in node.findings(name, "job_finished")] == [row], timeout=PAGE_BUDGET_S,
             what=f"{name}: job_finished ({row})")
    time.sleep(8)  # a process round and a group window more: nothing may follow
    assert node.counts() == {"feishu": 0, "hook": {"firing": 0, "resolved": 0}}, node.messages()
    (f,) = node.findings(name, "job_finished")
    assert f["severity"] == "info" and f["value"] == row, f
    assert f["labels"]["training_job"] == name and "rank" not in f["labels"]
    assert node.findings(name, "job_gone") == [] and node.findings(name, "rank_missing") == []
    return f


def test_row_end_line_the_issue_wording(node):
    """rank 0 prints `training complete`, every rank and the launcher exit 0, HBM freed."""
    name = "row-endline"
    job = node.job(name, FAKE_TRAIN_END_LINE="training complete", FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        job.finish()
        f = ended_cleanly(node, job, name, "end_line")
        assert f["details"]["evidence"]["end_line"] == "training complete"


def test_row_end_line_of_the_launcher(node):
    """No rank says anything at the end; the launcher (its stdout in a file) prints torchrun's
    success line once every rank exited 0."""
    name = "row-launcher"
    job = node.job(name, FAKE_TRAIN_QUIET_END="1", FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        job.finish()
        f = ended_cleanly(node, job, name, "end_line")
        assert "worker group successfully finished" in f["details"]["evidence"]["end_line"]


def test_row_heartbeats_done(node, tmp_path):
    name = "row-done"
    job = node.job(name, FAKE_TRAIN_QUIET_END="1", NPU_WATCHDOG_HEARTBEAT=f"{tmp_path}/hb/")
    with job:
        node.follow(job, name)
        wait_for(lambda: [len(j["heartbeats"]) for j in node.status()["discovery"]["jobs"] if j["name"] == name]
                 == [4], timeout=30, what="heartbeat files named")
        node.start_row()
        job.finish()
        f = ended_cleanly(node, job, name, "heartbeats_done")
        assert f["details"]["evidence"]["done"] == 4


def test_row_left_together_without_a_word(node):
    """Every rank exits 0 together, with no end line, no heartbeat `done` and a launcher that says
    nothing: the kernel's process events say each exited 0, no failure sign, no page. (Without
    them, not root, it is the `status_unknown` row: tests/e2e/test_job_end_without_exit_statuses.py.)"""
    if os.geteuid() != 0:
        pytest.skip("the kernel's process events need root")
    name = "row-together"
    job = node.job(name, quiet=True, FAKE_TRAIN_QUIET_END="1", FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        job.finish()
        assert job.proc.wait(30) == 0
        write_scenario(node.scenario, [])
        (f,) = wait_for(lambda: node.findings(name, "job_finished") or None, timeout=PAGE_BUDGET_S,
                        what=f"{name}: job_finished")
        time.sleep(8)
        assert node.counts() == {"feishu": 0, "hook": {"firing": 0, "resolved": 0}}, node.messages()
        assert f["value"] == "left_together" and f["severity"] == "info"


def test_row_stopped_a_cancel_is_not_a_clean_end(node):
    """The job's process group cancelled as a whole (SIGTERM), nothing saying it was done: the
    kernel's process events name the first to go and its signal; a warning `job_gone` (Feishu,
    not the critical ops webhook) asks "cancelled or preempted?". Without root no exit status is
    known and such a job is judged `status_unknown` (docs/discovery.md)."""
    if os.geteuid() != 0:
        pytest.skip("the kernel's process events need root")
    name = "row-stopped"
    job = node.job(name, FAKE_TRAIN_QUIET_END="1", FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        os.killpg(job.proc.pid, signal.SIGTERM)
        job.proc.wait(30)
        write_scenario(node.scenario, [])
        (gone,) = wait_for(lambda: node.findings(name, "job_gone") or None, timeout=PAGE_BUDGET_S,
                           what=f"{name}: job_gone")
        wait_for(lambda: node.counts()["feishu"] >= 1, timeout=PAGE_BUDGET_S, what="the message")
        time.sleep(8)
        assert node.counts() == {"feishu": 1, "hook": {"firing": 0, "resolved": 0}}, node.messages()
        assert gone["severity"] == "warning" and gone["details"]["verdict"]["row"] == "stopped", gone
        assert "terminated (signal 15)" in gone["summary"] and "cancelled or preempted?" in gone["summary"]
        assert gone["labels"]["training_job"] == name
        assert node.findings(name, "job_finished") == []


def test_row_failure_line_pages_as_today(node):
    """Rank 0 writes torch_npu's OOM and dies while its peers wait (as in a collective), then the
    launcher's group is killed: the OOM pages once per channel; job_gone (failure line) is held
    under it."""
    name = "row-oom"
    job = node.job(name, FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        job.oom(0)
        wait_for(lambda: node.counts()["feishu"] >= 1 and node.counts()["hook"]["firing"] >= 1,
                 timeout=PAGE_BUDGET_S, what="the OOM page")
        os.killpg(job.proc.pid, signal.SIGKILL)
        job.proc.wait(30)
        write_scenario(node.scenario, [])
        (gone,) = wait_for(lambda: node.findings(name, "job_gone") or None, timeout=PAGE_BUDGET_S, what="job_gone")
        time.sleep(8)
        assert node.counts() == {"feishu": 1, "hook": {"firing": 1, "resolved": 0}}, node.hook_alerts()
        assert [(a["alertname"], a["training_job"], a.get("rank")) for a in node.hook_alerts()] \
            == [("log_oom", name, "0")]
        assert gone["details"]["verdict"]["row"] == "failure_line" and gone["severity"] == "critical"
        assert "NPU out of memory" in gone["details"]["evidence"]["failure_line"]
        assert node.findings(name, "job_finished") == []


def test_rows_left_alone_then_left_apart(node):
    """Rank 1 exits 0 silently while its peers train, and its launcher reports nothing either (an
    exit status other than 0, from the kernel or a launcher's `failed (exitcode: 1)`, is a failure
    sign paged at once): missing once `end_window` passed (one page per channel); the others end
    much later: apart, not together, so job_gone."""
    name = "row-alone"
    job = node.job(name, quiet=True, FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        t0 = time.monotonic()
        job.quit_rank(1)
        wait_for(lambda: node.counts()["hook"]["firing"] >= 1, timeout=END_WINDOW_S + PAGE_BUDGET_S,
                 what="rank_missing page")
        assert time.monotonic() - t0 >= END_WINDOW_S  # held for the window: the peers might have followed
        time.sleep(5)
        assert node.counts() == {"feishu": 1, "hook": {"firing": 1, "resolved": 0}}, node.messages()
        assert [(a["alertname"], a["training_job"], a.get("rank")) for a in node.hook_alerts()] \
            == [("rank_missing", name, "1")]
        node.start_row()
        job.finish()
        assert job.wait() == 0  # every rank exited 0
        write_scenario(node.scenario, [])
        (gone,) = wait_for(lambda: node.findings(name, "job_gone") or None, timeout=PAGE_BUDGET_S, what="job_gone")
        assert gone["details"]["verdict"]["row"] == "left_apart"
        wait_for(lambda: node.counts()["hook"]["firing"] >= 1, timeout=PAGE_BUDGET_S, what="job_gone page")
        time.sleep(8)
        firing = [(a["alertname"], a["training_job"]) for a in node.hook_alerts()]
        assert firing == [("job_gone", name)], node.messages()
        assert node.counts()["feishu"] == node.counts()["hook"]["firing"] + node.counts()["hook"]["resolved"]

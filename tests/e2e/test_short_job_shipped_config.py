"""A job shorter than the process probe's interval, on the shipped config: another probe's scan of
the node found it, the process probe never saw it alive. Its end must still be judged (a clean
finish says `job_finished`; a silent failure would otherwise pass unseen). Seen first as a red
full run: a relaunch that started just after the process probe's round and trained for 10 s got
no `job_finished`.
"""

from __future__ import annotations

import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode, write_scenario

pytestmark = pytest.mark.slow


def _short_run(tmp_path, name, end, **job_env):
    """A shipped node whose process probe looks every 90 s (the other probes rescan the shared
    discovery every 10 s), and a job `name` run and ended (`end(job)`) within that first
    interval, after a scan found it: the process probe never saw it alive. (90 s: the job lives
    about 15 s, and a loaded machine stretches its start, the scan and its end.)"""
    node = ShippedNode(tmp_path, overrides={"probes": {"process": {"interval": "90s"}}}).wait_up()
    job = node.job(name, ranks=2, **job_env)
    with job:
        pids = wait_for(lambda: job.rank_pids() if len(job.rank_pids()) == 2 else None, what="ranks")
        write_scenario(node.scenario, pids)
        wait_for(lambda: f"job {name}: 2 ranks" in node.daemon.log_path.read_text(), timeout=30,
                 what="a scan finding it")
        time.sleep(2)
        node.start_row()
        end(job)
        job.proc.wait(30)
        write_scenario(node.scenario, [])
    runs = {p["name"]: p["runs_total"] for p in node.status()["probes"]}
    assert runs["process"] == 1, runs
    return node


def _judged(node, rule, name):
    return wait_for(lambda: [f for f in node.status()["findings"] if f["rule"] == rule
                             and f["labels"].get("training_job") == name],
                    timeout=150, what=f"the short job's end judged ({rule})")


def test_a_job_that_starts_and_ends_between_two_process_rounds_is_judged(tmp_path):
    node = _short_run(tmp_path, "short", lambda job: (job.ctl / "finish").touch())
    try:
        done = _judged(node, "job_finished", "short")
        assert done[0]["details"]["verdict"]["row"] in ("end_line", "heartbeats_done"), done[0]["details"]
        time.sleep(8)  # a group window more: nothing may follow
        assert node.counts() == {"feishu": 0, "hook": {"firing": 0, "resolved": 0}}, node.messages()
    finally:
        node.stop()


def test_a_short_job_that_fails_silently_is_not_called_finished(tmp_path):
    """Rank 1 exits 1 without a word; the launcher tears rank 0 down and prints nothing. The
    process probe never watched these processes' exits: how they ended is unknown, which with
    no end line is a failure to check (a warning to Feishu), never a clean end."""
    node = _short_run(tmp_path, "short-fail", lambda job: job.exit_rank(1), flavor="mpirun", quiet=True,
                      FAKE_TRAIN_NO_DONE="1", FAKE_TRAIN_QUIET_END="1")
    try:
        gone = _judged(node, "job_gone", "short-fail")
        assert gone[0]["severity"] == "warning" and gone[0]["details"]["verdict"]["row"] == "status_unknown", gone
        assert _judged(node, "job_gone", "short-fail") and not [
            f for f in node.status()["findings"] if f["rule"] == "job_finished"]
        wait_for(lambda: node.counts()["feishu"] >= 1, timeout=60, what="the warning sent")
        time.sleep(8)
        assert node.counts() == {"feishu": 1, "hook": {"firing": 0, "resolved": 0}}, node.messages()
    finally:
        node.stop()

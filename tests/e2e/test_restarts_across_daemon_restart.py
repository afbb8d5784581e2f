"""Restart counts survive a restart of the daemon itself (an upgrade, `systemctl restart`), on the
shipped example config: a torch-elastic-like job (`torchrun --max-restarts 5 ... > train.log`)
restarts its worker group once on rank 1's HCCL timeout, the daemon is restarted, and the group
restarts twice more on the same cause. The count goes on from where it was (3, not 2), on
/metrics and in `job_restarting`; before, it started again from 0 and the third restart on one
cause was reported as the second. Counts the messages per channel."""

from __future__ import annotations

import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode, write_scenario

pytestmark = pytest.mark.slow
PAGE_BUDGET_S = 90
KEY = 'npu_watchdog_job_restarts_total{cause="hccl_notify_wait_timeout",training_job="elastic-dr"}'


def _restarted(node, job, times):
    log = job.logs / "train.log"
    wait_for(lambda: log.read_text().count("will restart worker group") >= times, timeout=60, what=f"{times} restarts")
    pids = wait_for(lambda: job.rank_pids() if len(job.rank_pids()) == 2 else None, timeout=30, what="the group")
    write_scenario(node.scenario, pids)
    wait_for(lambda: node.metric(KEY) == float(times), timeout=PAGE_BUDGET_S, what=f"{times} restarts counted")


def test_the_restart_count_goes_on_across_a_daemon_restart(tmp_path):
    node = ShippedNode(tmp_path).wait_up()
    try:
        _restarts_across_a_restart(node)
    finally:
        node.stop()


def _restarts_across_a_restart(node):
    name = "elastic-dr"
    job = node.job(name, ranks=2, max_restarts=5, shared_log=True, FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        job.hccl_fail(1, 1)
        _restarted(node, job, 1)
        time.sleep(4)  # a log round more: the count is saved with the offsets of the line it read
        node.restart_daemon()
        # taken back from the saved state at the new daemon's first logs round
        wait_for(lambda: node.metric(KEY) == 1.0, timeout=60, what="the count taken back")
        job.hccl_fail(1, 2)
        _restarted(node, job, 3)
        (found,) = wait_for(lambda: [f for f in node.findings(name, "job_restarting") if f["value"] == "3"] or None,
                            timeout=PAGE_BUDGET_S, what="job_restarting at 3")
        assert found["details"]["restarts"] == 3 and "restarted 3 times on the same cause" in found["summary"]
        time.sleep(10)  # process and log rounds and a group window more
        feishu = [r.body.decode() for r in node.messages()["feishu"]]
        restart_pages = [m for m in feishu if "job_restarting" in m]
        # one page for the restarts, naming the count across both daemons (a count pages from 3
        # on: with the count reset by the restart, the third restart was the second, no page)
        assert len(restart_pages) == 1 and "重启 worker 组 3 次" in restart_pages[0], feishu
        assert [a["alertname"] for a in node.hook_alerts()] == ["log_hccl"], node.messages()["hook"]
        assert job.proc.poll() is None

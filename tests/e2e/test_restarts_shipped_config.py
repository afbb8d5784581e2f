"""Restarts are events, on the shipped example config: a real torch-elastic-like launcher whose
rank 1 fails on an HCCL timeout three times; each time the agent logs `will restart worker group`,
stops the other rank and starts the whole group again (new processes). A fake npu-smi follows the
ranks; a real HTTP receiver per shipped channel (Feishu: warning and up; the ops webhook:
critical). Counts the messages per channel and the labels of what was sent.
"""

from __future__ import annotations

import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode, write_scenario

pytestmark = pytest.mark.slow
PAGE_BUDGET_S = 90


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = ShippedNode(tmp_path_factory.mktemp("restarts"))
    try:
        wait_for(lambda: n.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        yield n
    finally:
        n.stop()


def test_elastic_job_restarting_3_times_on_one_hccl_timeout_pages_once_with_the_count(node):
    name = "elastic"
    # `torchrun ... > train.log 2>&1`: the agent's lines and the ranks' in one file, as most jobs run.
    job = node.job(name, ranks=2, max_restarts=5, shared_log=True, FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        first = job.rank_pids()
        job.hccl_fail(1, 3)
        log = job.logs / "train.log"
        wait_for(lambda: log.read_text().count("will restart worker group") >= 3, timeout=60, what="3 restarts")
        pids = wait_for(lambda: job.rank_pids() if len(job.rank_pids()) == 2 and not set(job.rank_pids()) & set(first)
                        else None, timeout=30, what="the restarted group")
        write_scenario(node.scenario, pids)
        (found,) = wait_for(lambda: node.findings(name, "job_restarting") or None, timeout=PAGE_BUDGET_S,
                            what="job_restarting")
        wait_for(lambda: "job_restarting" in str(node.messages()["feishu"]), timeout=PAGE_BUDGET_S, what="the page")
        time.sleep(10)  # process and log rounds and a group window more: nothing may follow
        counts = node.counts()
        feishu = [r.body.decode() for r in node.messages()["feishu"]]
        restart_pages = [m for m in feishu if "job_restarting" in m]
        # Feishu (warning and up): the HCCL timeout once, the restarts once; the ops webhook
        # (critical): the HCCL timeout only. No departure page: the group was replaced, not lost.
        assert counts == {"feishu": 2, "hook": {"firing": 1, "resolved": 0}}, node.messages()
        assert len(restart_pages) == 1, feishu
        assert "重启 worker 组 3 次" in restart_pages[0] and "hccl_notify_wait_timeout" in restart_pages[0]
        assert [a["alertname"] for a in node.hook_alerts()] == ["log_hccl"]
        for rule in ("rank_missing", "job_gone", "job_finished"):
            assert rule not in str(feishu) and node.findings(name, rule) == [], rule
        assert found["severity"] == "warning" and found["value"] == "3"
        assert found["labels"] == {"host": found["labels"]["host"], "training_job": name,
                                   "cause": "hccl_notify_wait_timeout"}, found
        assert found["details"]["restarts"] == 3 and found["details"]["limit"] == 5
        assert "restarted 3 times on the same cause" in found["summary"]
        assert node.metric('npu_watchdog_job_restarts_total{cause="hccl_notify_wait_timeout",'
                           f'training_job="{name}"}}') == 3.0
        assert job.proc.poll() is None  # the job runs on after its third restart

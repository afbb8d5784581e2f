"""The daemon restarted (an upgrade, a config rollout) while a rank is paged missing and its peers
still run (blocked in a collective until HCCL's timeout, as real ranks are under a launcher that
does not tear them down): the page goes on. Before, the restarted daemon knew only that the rank
"never appeared" once `start_grace` passed (a finding without the pid: a second page) and the
first page's alert resolved (a false RESOLVED). The shipped config with shorter time constants
(`start_grace` 15m and `resolve_delay` 1m would make this test 17 minutes long)."""

from __future__ import annotations

import os
import time

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.jobkit import TAG, ShippedDaemon, TrainJob, fake_npu_smi, write_scenario

pytestmark = pytest.mark.slow
OVERRIDES = {"probes": {"process": {"start_grace": "10s"}}, "alerting": {"resolve_delay": "5s"}}


def test_a_restart_while_a_rank_is_paged_missing_neither_pages_nor_resolves_it_again(tmp_path):
    env, scenario = fake_npu_smi(tmp_path)
    feishu, hook = Receiver("feishu").start(), Receiver("webhook").start()
    tag = f"t-lost{os.getpid()}"
    job = TrainJob(tmp_path / "job", ranks=4, tag=tag, port=str(29600 + os.getpid() % 100),
                   env={"NPU_WATCHDOG_JOB": "lost-rank", "FAKE_TRAIN_NO_DONE": "1"})
    d = ShippedDaemon(tmp_path / "d", env, f"{TAG}={tag}", feishu.url, hook.url, overrides=OVERRIDES)
    try:
        wait_for(lambda: d.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        job.start()
        write_scenario(scenario, job.rank_pids())
        wait_for(lambda: 'npu_watchdog_job_ranks_alive{training_job="lost-rank"} 4.0' in d.get("/metrics"),
                 timeout=60, what="ranks followed")
        job.exit_rank(1)
        wait_for(lambda: hook.accepted(), timeout=90, what="the rank_missing page")
        time.sleep(3)
        (page,) = [a["labels"] for r in hook.accepted() for a in r.json["alerts"]]
        assert page["alertname"] == "rank_missing" and page["rank"] == "1" and page.get("pid"), page
        d.stop()
        d = ShippedDaemon(tmp_path / "d", env, f"{TAG}={tag}", feishu.url, hook.url, overrides=OVERRIDES)
        wait_for(lambda: d.status()["discovery"]["jobs"], timeout=60, what="the job found again")
        # Past the restarted daemon's start grace, its warm-up and the resolve delay, several times.
        time.sleep(45)
        sent = [(r.json["status"], [a["labels"] for a in r.json["alerts"]]) for r in hook.accepted()]
        assert [s for s, _ in sent] == ["firing"], sent
        assert len(feishu.accepted()) == 1, len(feishu.accepted())
        missing = [f for f in d.status()["findings"] if f["rule"] == "rank_missing"]
        assert [(f["labels"]["rank"], f["labels"].get("pid")) for f in missing] == [("1", page["pid"])], missing
    finally:
        job.stop()
        d.stop()
        feishu.stop()
        hook.stop()

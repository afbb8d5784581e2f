"""A new job's log files are followed as soon as discovery finds them, on the shipped example
config: the logs probe is woken by the process scan that found a rank's log file it had not seen,
not left until its next rescan. The rescan is set to 10 minutes here so that only the wake-up can
follow them within the test; before, the files waited for the rescan (30 s on the shipped config),
and a job relaunched into old files had more time to mix its lines with the earlier run's before
the daemon first looked (see test_relaunch_appends_shipped_config.py)."""

from __future__ import annotations

import os

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.jobkit import TAG, ShippedDaemon, TrainJob, fake_npu_smi, write_scenario

pytestmark = pytest.mark.slow


def test_a_new_jobs_files_are_followed_without_waiting_for_the_rescan(tmp_path):
    env, scenario = fake_npu_smi(tmp_path)
    feishu, hook = Receiver("feishu").start(), Receiver("webhook").start()
    tag = f"t-newjob{os.getpid()}"
    job = TrainJob(tmp_path / "job", ranks=2, tag=tag, port=str(29400 + os.getpid() % 100),
                   env={"NPU_WATCHDOG_JOB": "new-job"})
    d = ShippedDaemon(tmp_path / "d", env, f"{TAG}={tag}", feishu.url, hook.url,
                      overrides={"probes": {"logs": {"rescan": "10m"}}})
    try:
        wait_for(lambda: d.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        wait_for(lambda: [p for p in d.status()["probes"] if p["name"] == "logs" and p["runs_total"] >= 1],
                 timeout=60, what="the logs probe's first round")
        job.start()
        write_scenario(scenario, job.rank_pids())
        wait_for(lambda: 'npu_watchdog_log_files_followed{source="train"} 2.0' in d.get("/metrics"), timeout=120,
                 what="both rank files followed before the 10-minute rescan")
        (job.ctl / "npuoom-1").touch()  # and read: rank 1's OOM pages once
        wait_for(lambda: hook.accepted(), timeout=90, what="the OOM's page")
        assert any(a["labels"]["alertname"] == "log_oom" and a["labels"].get("rank") == "1"
                   for r in hook.accepted() for a in r.json["alerts"]), [r.json for r in hook.accepted()]
    finally:
        job.stop()
        d.stop()
        feishu.stop()
        hook.stop()

"""A new job's log files are followed as soon as discovery finds them, on the shipped example
config: the logs probe is woken by the process scan that found a rank's log file it had not seen,
not left until its next rescan. The rescan is set to 10 minutes here so that only the wake-up can
follow them within the test; before, the files waited for the rescan (30 s on the shipped config),
and a job relaunched into old files had more time to mix its lines with the earlier run's before
the daemon first looked (see test_relaunch_appends_shipped_config.py)."""

from __future__ import annotations

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode, write_scenario

pytestmark = pytest.mark.slow


def test_a_new_jobs_files_are_followed_without_waiting_for_the_rescan(tmp_path):
    node = ShippedNode(tmp_path, overrides={"probes": {"logs": {"rescan": "10m"}}})
    try:
        node.wait_up()
        wait_for(lambda: [p for p in node.status()["probes"] if p["name"] == "logs" and p["runs_total"] >= 1],
                 timeout=60, what="the logs probe's first round")
        with node.job("new-job", ranks=2) as job:
            write_scenario(node.scenario, job.rank_pids())
            wait_for(lambda: node.metric('npu_watchdog_log_files_followed{source="train"}') == 2.0, timeout=120,
                     what="both rank files followed before the 10-minute rescan")
            (job.ctl / "npuoom-1").touch()  # and read: rank 1's OOM pages
            wait_for(lambda: node.hook.accepted(), timeout=90, what="the OOM's page")
            assert any(a["labels"]["alertname"] == "log_oom" and a["labels"].get("rank") == "1"
                       for r in node.hook.accepted() for a in r.json["alerts"]), [r.json for r in node.hook.accepted()]
    finally:
        node.stop()

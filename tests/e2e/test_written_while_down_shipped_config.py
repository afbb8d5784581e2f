"""Lines a job wrote while the daemon was down are scanned, on the zero-config path too: the
daemon (shipped example config) follows a 2-rank job's log files, is stopped (an upgrade, a
restart), and meanwhile rank 1 prints torch_npu's out-of-memory error and exits while rank 0
runs on. The restarted daemon finds rank 1's file written by nobody now (so discovery no longer
lists it) but saved with its offset, job and rank: it reads what was added and pages `log_oom`
for rank 1 once, on each channel. Before, discovered files were resumed only while a live rank
still held them, and the OOM was never read."""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode, write_scenario

pytestmark = pytest.mark.slow
OOM = ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 1; 60.96 GiB total capacity; "
       "58.10 GiB already allocated; 1.20 GiB free)\n")


def test_an_oom_written_while_the_daemon_was_down_pages_once_after_the_restart(tmp_path):
    node = ShippedNode(tmp_path).wait_up()
    try:
        with node.job("down-oom", ranks=2, FAKE_TRAIN_NO_DONE="1") as job:
            write_scenario(node.scenario, job.rank_pids())
            wait_for(lambda: node.metric('npu_watchdog_log_files_followed{source="train"}') == 2.0, timeout=90,
                     what="both rank files followed")

            def meanwhile():
                saved = json.loads((tmp_path / "state" / "log-offsets.json").read_text())["files"]
                assert sorted((v["job"], v["rank"]) for v in saved.values()) == [("down-oom", "0"), ("down-oom", "1")]
                with open(job.logs / "rank1.log", "a") as fh:
                    fh.write(OOM)
                job.exit_rank(1)
                write_scenario(node.scenario, job.rank_pids()[:1])

            node.restart_daemon(meanwhile)
            wait_for(lambda: node.hook.accepted(), timeout=90, what="the OOM's page")
            time.sleep(10)  # a few rounds and a group window more: nothing may follow
            sent = [(r.json["status"], [(a["labels"]["alertname"], a["labels"].get("rank")) for a in r.json["alerts"]])
                    for r in node.hook.accepted()]
            assert sent == [("firing", [("log_oom", "1")])], sent
            assert len(node.feishu.accepted()) == 1, len(node.feishu.accepted())
            (f,) = node.findings("down-oom", "log_oom")
            assert "NPU out of memory" in f["summary"], f
    finally:
        node.stop()

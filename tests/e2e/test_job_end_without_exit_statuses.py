"""A clean end needs positive evidence, also where the daemon cannot read exit statuses: the
daemon on the shipped example config (unedited, zero-config discovery) run without
CAP_NET_ADMIN (as a daemon that is not root runs: the kernel's process-events connector refuses
it, so no rank's or launcher's exit status is known), real rank process trees under a quiet
torchrun-like launcher, a fake npu-smi whose process table follows the ranks, and a real HTTP
receiver per shipped channel (Feishu: warning and up, in Chinese; the ops webhook: critical).

- Every rank exits 0 silently and the launcher says nothing: no end line, no heartbeat `done`,
  no launcher success line, no exit status. That is not worded as a clean finish: the
  `status_unknown` row, one warning `job_gone` to Feishu, nothing to the ops webhook, no
  `job_finished`.
- The same job whose launcher prints its success line (torchrun's `worker group successfully
  finished`) is a clean end without any exit status: `job_finished` (`end_line`), nothing sent.

Each row counts only the messages received during the row; the rows share one daemon.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, wait_for
from tests.jobkit import ShippedNode, write_scenario

pytestmark = pytest.mark.slow
SHIPPED = REPO / "config" / "npu-watchdog.example.yaml"
#: The shipped process probe reads every 10 s, the logs probe every 3 s; a page also waits for
#: the group window. Generous: the machine is shared.
PAGE_BUDGET_S = 90
#: The daemon without the capability the process-events connector needs (root keeps the rest).
NO_NET_ADMIN = ("setpriv", "--bounding-set", "-net_admin", "--inh-caps", "-net_admin", "--")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop CAP_NET_ADMIN")
    # As root the prefix drops the capability; a daemon that is not root lacks it anyway.
    n = ShippedNode(tmp_path_factory.mktemp("noexits"), prefix=NO_NET_ADMIN if os.geteuid() == 0 else ())
    try:
        wait_for(lambda: n.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        yield n
    finally:
        n.stop()


def test_doctor_says_no_exit_status_can_be_read(node):
    out = subprocess.run([*node.prefix, sys.executable, "-m", "watchdog", "doctor", "-c", str(SHIPPED)],
                         env=node.daemon.env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=300).stdout.decode(errors="replace")
    lines = [x for x in out.splitlines() if "exit statuses" in x]
    assert len(lines) == 1, out
    line = lines[0]
    assert "WARN" in line and "process events are not readable" in line, out


def test_a_quiet_launcher_whose_ranks_exit_0_is_not_a_clean_finish(node):
    name = "quiet-blind"
    job = node.job(name, quiet=True, FAKE_TRAIN_QUIET_END="1", FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        job.finish()
        assert job.proc.wait(30) == 0
        write_scenario(node.scenario, [])
        (gone,) = wait_for(lambda: node.findings(name, "job_gone") or None, timeout=PAGE_BUDGET_S,
                           what=f"{name}: job_gone")
        wait_for(lambda: node.counts()["feishu"] >= 1, timeout=PAGE_BUDGET_S, what="the Feishu message")
        time.sleep(8)  # a process round and a group window more: nothing may follow
        assert node.counts() == {"feishu": 1, "hook": {"firing": 0, "resolved": 0}}, node.messages()
        assert gone["severity"] == "warning" and gone["details"]["verdict"]["row"] == "status_unknown", gone
        assert gone["details"]["evidence"]["exit_source"] == "" and gone["details"]["evidence"]["exits"] == []
        assert "exit status unknown: no evidence of a clean finish" in gone["summary"]
        assert "ended cleanly" not in gone["summary"]
        assert gone["labels"]["training_job"] == name and "rank" not in gone["labels"]
        assert node.findings(name, "job_finished") == []
        (msg,) = node.messages()["feishu"]
        text = json.dumps(msg.json, ensure_ascii=False)
        assert name in text and "退出状态未知" in text and "没有正常结束的证据" in text, text
        assert "正常结束，不是故障" not in text


def test_a_launcher_success_line_is_a_clean_end_without_exit_statuses(node):
    name = "launcher-blind"
    job = node.job(name, FAKE_TRAIN_QUIET_END="1", FAKE_TRAIN_NO_DONE="1")
    with job:
        node.follow(job, name)
        node.start_row()
        job.finish()
        assert job.wait() == 0
        write_scenario(node.scenario, [])
        wait_for(lambda: [f["value"] for f in node.findings(name, "job_finished")] == ["end_line"],
                 timeout=PAGE_BUDGET_S, what=f"{name}: job_finished (end_line)")
        time.sleep(8)
        assert node.counts() == {"feishu": 0, "hook": {"firing": 0, "resolved": 0}}, node.messages()
        (f,) = node.findings(name, "job_finished")
        assert f["severity"] == "info" and f["labels"]["training_job"] == name
        assert "worker group successfully finished" in f["details"]["evidence"]["end_line"]
        assert f["details"]["evidence"]["exit_source"] == ""
        assert node.findings(name, "job_gone") == []

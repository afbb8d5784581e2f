"""Launch scripts that start their ranks in the background and exit (no `wait`), as MindSpore's
model_zoo `run_distribute_train.sh` does: the ranks are orphans (parent: init) with no rendezvous
address. Two such jobs of one user on one node, each with its own name and NPUs, on the shipped
config, are two jobs: a silent `exit 1` of the second one's rank 1 pages once, about that job."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import TAG, TRAIN, ShippedNode

pytestmark = pytest.mark.slow


def ms_job(node, name, first_dev, ranks=2):
    root = node.root / name
    (root / "logs").mkdir(parents=True)
    (root / "ctl").mkdir()
    env = dict(os.environ, FAKE_TRAIN_CONTROL=str(root / "ctl"), **{TAG: node.tag}, NPU_WATCHDOG_JOB=name)
    env.pop("RANK", None)
    script = (f"for i in $(seq 0 {ranks - 1}); do RANK_ID=$i DEVICE_ID=$((i + {first_dev})) RANK_SIZE={ranks} "
              f"nohup '{sys.executable}' '{TRAIN}' > '{root}'/logs/rank$i.log 2>&1 & done")
    import subprocess
    subprocess.run(["bash", "-c", script], env=env, check=True)
    return root


def pids_of(root):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if str(root / "ctl").encode() in open(f"/proc/{p}/environ", "rb").read():
                    out.append(int(p))
            except OSError:
                pass
    return out


def test_two_orphaned_mindspore_jobs_are_two_jobs_and_a_silent_exit_1_of_the_second_pages(tmp_path):
    node = ShippedNode(tmp_path)
    roots = []
    try:
        wait_for(lambda: node.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        roots.append(ms_job(node, "msA", 0))
        time.sleep(1.5)
        roots.append(ms_job(node, "msB", 2))
        names = lambda: sorted(j["name"] for j in node.status()["discovery"]["jobs"])  # noqa: E731
        # Both jobs number their ranks 0 and 1: before, msB's were taken for helpers of msA's.
        wait_for(lambda: names() == ["msA", "msB"], timeout=40, what="both jobs discovered")
        node.start_row()
        (roots[1] / "ctl" / "exit-1").touch()  # msB rank 1 exits 1, silently
        wait_for(lambda: node.counts()["hook"]["firing"] >= 1, timeout=90, what="msB's page")
        time.sleep(5)  # a second page would come within a few rounds
        assert node.counts() == {"feishu": 1, "hook": {"firing": 1, "resolved": 0}}, node.counts()
        (alert,) = node.hook_alerts()
        assert alert["alertname"] == "rank_missing" and alert["training_job"] == "msB" and alert["rank"] == "1", alert
    finally:
        for r in roots:
            for p in pids_of(r):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        node.stop()

"""Issue "zero-config", done when: the daemon started with the shipped example config, unedited,
on a node running a 4-rank job under a torchrun-like launcher, reports the 4 ranks with pids, NPUs
(npu-smi's process table) and log files, not the launcher; one NaN line in a rank's stdout file
pages exactly once per channel; `discover --json` prints the documented schema.

Only environment variables the shipped config reads are set (listen address, webhook URLs, and
the discovery scope that keeps other tests' training processes on this machine out of view).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import REPO, free_port, http_get, wait_for
from tests.jobkit import TrainJob

pytestmark = pytest.mark.slow
SHIPPED = REPO / "config" / "npu-watchdog.example.yaml"
#: The shipped group window (30 s) holds the first message; the log probe reads every 3 s.
PAGE_BUDGET_S = 60


def write_scenario(path, pids):
    doc = {"generate": {"npus": 8, "aicore": 60},
           "processes": [{"npu": n, "chip": 0, "pid": pid, "name": "python3", "memory_mb": 30000}
                         for n, pid in enumerate(pids)]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return sorted(int(x) for x in out.split())


def firing(rx):
    return [r.json for r in rx.accepted()]


def test_shipped_config_watches_a_torchrun_job_and_a_nan_pages_once(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "npu-smi").symlink_to(REPO / "tests" / "fakes" / "npu-smi")
    scenario = tmp_path / "npu.json"
    write_scenario(scenario, [])
    port = free_port()
    job = TrainJob(tmp_path / "job", ranks=4, env={"RANK": "0"})
    with Receiver("feishu") as fs, Receiver("webhook") as hook, job:
        rank_pids = wait_for(lambda: children(job.proc.pid) if len(children(job.proc.pid)) == 4 else None,
                             what="4 rank processes")
        write_scenario(scenario, rank_pids)
        env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", FAKE_NPU_SMI_SCENARIO=str(scenario),
                   NPU_WATCHDOG_LISTEN=f"127.0.0.1:{port}", NPU_WATCHDOG_DISCOVERY_ONLY=job.only_env,
                   FEISHU_WEBHOOK_URL=fs.url, OPS_WEBHOOK_URL=hook.url)
        env.pop("RANK", None)
        err = open(tmp_path / "daemon.log", "wb")
        daemon = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "-c", str(SHIPPED),
                                   "--state-dir", str(tmp_path / "state")], env=env, stdout=err, stderr=err,
                                  cwd=str(REPO))
        try:
            url = f"http://127.0.0.1:{port}"

            def discovered():
                assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()
                st = json.loads(http_get(url + "/api/status")[1])
                jobs = st["discovery"]["jobs"]
                return jobs if jobs and all(r["npu"] is not None for r in jobs[0]["ranks"]) else None

            (j,) = wait_for(discovered, timeout=40, what="the job with its NPUs")
            assert [r["rank"] for r in j["ranks"]] == [0, 1, 2, 3]
            assert sorted(r["pid"] for r in j["ranks"]) == rank_pids
            assert j["launcher"]["pid"] == job.proc.pid and job.proc.pid not in rank_pids
            by_pid = {pid: n for n, pid in enumerate(rank_pids)}
            for r in j["ranks"]:
                assert r["npu"] == by_pid[r["pid"]]
                assert r["logs"] == [str(job.logs / f"rank{r['rank']}.log")]
            page = http_get(url + "/")[1]
            assert "4 ranks" in page and j["name"] in page
            metrics = http_get(url + "/metrics")[1]
            assert f'npu_watchdog_discovered_ranks{{training_job="{j["name"]}"}} 4.0' in metrics

            out = subprocess.run([sys.executable, "-m", "watchdog", "discover", "--json", "-c", str(SHIPPED)],
                                 env=env, capture_output=True, text=True, cwd=str(REPO), timeout=60)
            assert out.returncode == 0, out.stderr
            doc = json.loads(out.stdout)
            assert [r["pid"] for r in doc["jobs"][0]["ranks"]] == [r["pid"] for r in j["ranks"]]
            assert [r["npu"] for r in doc["jobs"][0]["ranks"]] == [r["npu"] for r in j["ranks"]]

            time.sleep(4)  # the log probe follows the rank files (from their end: the job ran first)
            assert firing(fs) == [] and firing(hook) == []
            job.nan(2)
            wait_for(lambda: firing(fs) and firing(hook), timeout=PAGE_BUDGET_S, what="the NaN page")
            time.sleep(10)  # anything else would come with the same or the next flush
            assert len(firing(fs)) == 1 and len(firing(hook)) == 1
            (msg,) = firing(hook)
            assert msg["status"] == "firing"
            assert [(a["labels"]["alertname"], a["labels"]["training_job"], a["labels"].get("rank")) for a in msg["alerts"]] \
                == [("log_nan", j["name"], "2")]
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()
            err.close()

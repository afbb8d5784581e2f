"""Discovery over real process trees: launchers, wrappers, MindSpore-style jobs, helper children."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, wait_for
from tests.jobkit import TrainJob
from watchdog.discovery.feed import own_pids
from watchdog.discovery.scan import ScanOptions, discover


def scan(job: TrainJob):
    return discover(ScanOptions(ignore=own_pids(), only=((job.only_env.split("=")[0], job.tag),)))


def child_pids(pid: int):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return sorted(int(x) for x in out.split())


@pytest.mark.parametrize("style", ["torchrun", "bash"])
def test_launcher_with_rank_in_its_env_is_never_a_rank(tmp_path, style):
    # The launcher itself carries RANK=0 (as under a scheduler that sets it per node): env RANK of
    # the children wins, the launcher (and a bash -c wrapper) is not a rank, no rank is doubled.
    with TrainJob(tmp_path, ranks=4, style=style, env={"RANK": "0"}) as job:
        found = scan(job)
        assert len(found.jobs) == 1
        j = found.jobs[0]
        assert [r.rank for r in j.ranks] == [0, 1, 2, 3]
        assert [r.local_rank for r in j.ranks] == [0, 1, 2, 3]
        assert j.world_size == 4 and j.local_world_size == 4
        assert j.launcher is not None and "torchrun" in j.launcher.cmdline
        assert j.launcher.pid not in {r.pid for r in j.ranks}
        for r in j.ranks:
            assert r.logs == (str(job.logs / f"rank{r.rank}.log"),)
        if style == "bash":
            assert job.proc.pid not in {r.pid for r in j.ranks}
            assert j.launcher.pid != job.proc.pid  # torchrun under the wrapper is the launcher
        assert j.hccl.exec_timeout_s == 1836 and j.hccl.connect_timeout_s == 120


def test_dataloader_workers_are_not_ranks(tmp_path):
    with TrainJob(tmp_path, ranks=2, workers=3) as job:
        j = scan(job).jobs[0]
        assert [r.rank for r in j.ranks] == [0, 1]
        for r in j.ranks:
            assert len(child_pids(r.pid)) == 3  # the workers run, carrying RANK, and are left out


def test_mindspore_style_job(tmp_path):
    env = {"HCCL_EXEC_TIMEOUT": "900", "HCCL_CONNECT_TIMEOUT": "600", "ASCEND_PROCESS_LOG_PATH": str(tmp_path / "alog"),
           "NPU_WATCHDOG_HEARTBEAT": str(tmp_path / "hb") + "/", "NPU_WATCHDOG_JOB": "ms-pretrain"}
    with TrainJob(tmp_path, ranks=2, style="mindspore", env=env) as job:
        j = scan(job).jobs[0]
        assert j.name == "ms-pretrain"
        assert [(r.rank, r.npu) for r in j.ranks] == [(0, 0), (1, 1)]  # DEVICE_ID
        assert j.launcher is not None and j.launcher.pid == job.proc.pid  # the shell loop
        assert j.plog_dirs == (str(tmp_path / "alog/debug/plog"), str(tmp_path / "alog/run/plog"))
        assert j.heartbeats == (str(tmp_path / "hb/rank0.json"), str(tmp_path / "hb/rank1.json"))
        assert (j.hccl.exec_timeout_s, j.hccl.connect_timeout_s, j.hccl.source) == (900, 600, "environment")


def test_two_jobs_are_two_names(tmp_path):
    with TrainJob(tmp_path / "a", ranks=2, port="29501") as a, \
            TrainJob(tmp_path / "b", ranks=2, port="29502", tag=a.tag) as b:
        found = scan(a)
        assert len(found.jobs) == 2
        assert len({j.name for j in found.jobs}) == 2
        assert {j.launcher.pid for j in found.jobs} == {a.proc.pid, b.proc.pid}


def test_secrets_in_environment_are_never_read(tmp_path):
    with TrainJob(tmp_path, ranks=1, env={"HF_TOKEN": "hf_supersecret", "AWS_SECRET_ACCESS_KEY": "abc123xyz"}) as job:
        found = scan(job)
        text = repr(found)
        assert "supersecret" not in text and "abc123xyz" not in text


def run_discover(*args, env=None):
    return subprocess.run([sys.executable, "-m", "watchdog", "discover", *args], capture_output=True, text=True,
                          cwd=str(REPO), env=env, timeout=60)


def test_discover_cli_json_schema_and_exit_codes(tmp_path):
    cfg = tmp_path / "c.yaml"
    with TrainJob(tmp_path, ranks=2) as job:
        cfg.write_text(f"discovery:\n  enabled: true\n  only_env: '{job.only_env}'\n")
        out = run_discover("--json", "-c", str(cfg))
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert list(doc) == ["jobs"] and len(doc["jobs"]) == 1
        j = doc["jobs"][0]
        assert list(j) == ["name", "launcher", "world_size", "ranks", "plog_dirs", "heartbeats", "hccl"]
        assert list(j["launcher"]) == ["pid", "cmdline"] and isinstance(j["launcher"]["pid"], int)
        assert list(j["hccl"]) == ["exec_timeout_s", "connect_timeout_s"]
        for r in j["ranks"]:
            assert list(r) == ["rank", "local_rank", "pid", "npu", "logs"]
        text = run_discover("-c", str(cfg))
        assert text.returncode == 0 and "2 ranks" in text.stdout
    job.stop()
    none = run_discover("--json", "-c", str(cfg))
    assert none.returncode == 1 and json.loads(none.stdout) == {"jobs": []}
    cfg.write_text("discovery: {only_env: 'not a pair'}\n")
    assert run_discover("-c", str(cfg)).returncode == 2


def test_doctor_reports_what_discovery_sees(tmp_path):
    cfg = tmp_path / "c.yaml"
    with TrainJob(tmp_path, ranks=2, env={"NPU_WATCHDOG_JOB": "doc-job"}) as job:
        cfg.write_text(f"discovery:\n  enabled: true\n  only_env: '{job.only_env}'\n")
        out = subprocess.run([sys.executable, "-m", "watchdog", "doctor", "--json", "-c", str(cfg)],
                             capture_output=True, text=True, cwd=str(REPO), timeout=120)
        doc = json.loads(out.stdout)
        (check,) = [c for c in doc["checks"] if c["group"] == "daemon" and c["name"] == "discovery"]
        assert check["status"] == "pass" and "doc-job: 2 ranks" in check["reason"]
        assert check["details"]["feeds"]["process"] == "discovery"



def test_a_rank_with_a_large_environment_keeps_its_rank_keys(tmp_path):
    """torchrun appends RANK and LOCAL_RANK after the environment it copies: a rank whose
    environment holds 1.5 MB of other variables (Linux allows 2 MiB by default) is still a rank."""
    from watchdog.discovery.environ import wanted_keys
    from watchdog.discovery.procfs import read_record

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    env.update({f"BIG_{i}": "x" * 100_000 for i in range(15)})
    env.update(RANK="3", LOCAL_RANK="3")  # last, as torchrun sets them
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        # Right after Popen returns the new program may still be setting up: no command line yet,
        # or (mid-exec, while the kernel copies 1.5 MB of strings) its command line but an empty
        # environment; discovery reads a young process again until it settles (procfs.ProcTable).
        def settled():
            rec = read_record(proc.pid, wanted_keys())
            return rec if rec is not None and rec.env else None

        rec = wait_for(settled, timeout=10, what="the rank's record with its environment")
        assert rec is not None and rec.env is not None
        assert rec.env.get("RANK") == "3" and rec.env.get("LOCAL_RANK") == "3"
        assert not any(k.startswith("BIG_") for k in rec.env)  # only the whitelisted keys are kept
    finally:
        proc.kill()
        proc.wait()


def test_a_job_keeps_its_name_when_its_launch_script_leaves(tmp_path):
    """A site's launch script starts two ranks in the background (`nohup python train.py &`) and
    exits: while it runs the job is named after it (`run-<time>`), after it the ranks' script
    would name it (`train-<time>`). The feed keeps the first name while a rank of the job lives,
    so the process probe never sees the running job end and a new one start."""
    import os as _os
    import time as _time

    from tests.jobkit import TAG, TRAIN
    from watchdog.discovery.feed import DiscoveryFeed

    tag = f"t-keep{_os.getpid()}"
    (tmp_path / "ctl").mkdir()
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nfor i in 0 1; do\n  RANK=$i LOCAL_RANK=$i WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
                      f"MASTER_PORT={29800 + _os.getpid() % 100} nohup '{sys.executable}' '{TRAIN}' "
                      f"> '{tmp_path}'/rank$i.log 2>&1 &\ndone\nwhile [ ! -e '{tmp_path}/leave' ]; do sleep 0.1; done\n")
    script.chmod(0o755)
    env = dict(_os.environ, FAKE_TRAIN_CONTROL=str(tmp_path / "ctl"), **{TAG: tag})
    env.pop("RANK", None)
    sh = subprocess.Popen([str(script)], env=env, start_new_session=True, cwd=str(tmp_path))
    feed = DiscoveryFeed(ScanOptions(ignore=own_pids(), only=((TAG, tag),)))
    pids = []
    try:
        first = wait_for(lambda: (lambda f: f.jobs[0] if f.jobs and len(f.jobs[0].ranks) == 2 else None)(feed.refresh()),
                         timeout=30, what="the job and its two ranks")
        pids = [r.pid for r in first.ranks]
        assert first.launcher is not None and first.launcher.pid == sh.pid and first.name.startswith("run-")
        (tmp_path / "leave").touch()
        assert sh.wait(30) == 0
        _time.sleep(1.1)  # another second on the clock: a name made afresh would differ
        (after,) = feed.refresh().jobs
        assert after.launcher is None and sorted(r.pid for r in after.ranks) == sorted(pids)
        assert after.name == first.name
        # Without the feed's memory the name is the ranks' script's: what the feed keeps it from.
        (fresh,) = DiscoveryFeed(feed.opts).refresh().jobs
        assert fresh.name.startswith("train-") and fresh.name != first.name
    finally:
        for p in pids:
            try:
                _os.kill(p, 9)
            except OSError:
                pass
        if sh.poll() is None:
            sh.kill()

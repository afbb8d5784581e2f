"""A job relaunched into the log folder of an earlier run appends to its files (torchrun's
`--log-dir` opens `rank<N>.log` for appending, as `>>` and `tee -a` do). The earlier run's OOM in
those files is not this run's and must not page it, on the shipped example config:
- files the daemon never read, last written a day before the job started (the daemon was
  installed since, or the folder was copied): read from their end when first seen;
- files the daemon read while the earlier run ran and forgot after `discovery.forget_after`:
  read on from where it stopped (`watchdog.logrules.retired`), across a daemon restart too.
Before, a file discovered after the daemon's first round was read from its beginning, and each
relaunch paged the earlier run's OOM as a new `log_oom`."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.jobkit import TAG, ShippedDaemon, TrainJob, fake_npu_smi, write_scenario

pytestmark = pytest.mark.slow
OLD_OOM = ("Traceback (most recent call last):\n  File \"train.py\", line 412, in <module>\n    loss = model(batch)\n"
           "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity; "
           "57.80 GiB already allocated; 1.02 GiB free)\n")


def _sent(hook):
    return [(r.json["status"], a["labels"]["alertname"], a["labels"].get("training_job"))
            for r in hook.accepted() for a in r.json["alerts"]]


def _followed(d, n):
    return f'npu_watchdog_log_files_followed{{source="train"}} {float(n)}' in d.get("/metrics")


def _run_clean(job, scenario):
    """Start `job` held silent until the daemon follows its files, then train and end cleanly."""
    (job.ctl / "hang").touch()
    job.start()
    write_scenario(scenario, job.rank_pids())
    return job


def test_a_relaunch_into_old_files_never_read_does_not_page_their_oom(tmp_path):
    env, scenario = fake_npu_smi(tmp_path)
    feishu, hook = Receiver("feishu").start(), Receiver("webhook").start()
    tag = f"t-relold{os.getpid()}"
    job = TrainJob(tmp_path / "job", ranks=2, tag=tag, port=str(29600 + os.getpid() % 100),
                   env={"NPU_WATCHDOG_JOB": "relaunch-old"})
    for r in range(2):
        p = job.logs / f"rank{r}.log"
        p.write_text("".join(f" iteration {i:8d}/ 100000 | lm loss: 1.9 |\n" for i in range(1, 40)) + OLD_OOM)
        day = time.time() - 86400
        os.utime(p, (day, day))
    d = ShippedDaemon(tmp_path / "d", env, f"{TAG}={tag}", feishu.url, hook.url)
    try:
        wait_for(lambda: d.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        _run_clean(job, scenario)
        wait_for(lambda: _followed(d, 2), timeout=90, what="both rank files followed")
        (job.ctl / "hang").unlink()
        wait_for(lambda: (job.logs / "rank0.log").read_text().count(" iteration ") > 45, timeout=30, what="training")
        (job.ctl / "finish").touch()
        assert job.proc.wait(30) == 0
        wait_for(lambda: any(f["rule"] == "job_finished" for f in d.status()["findings"]), timeout=90,
                 what="the clean end")
        time.sleep(5)  # a group window more: nothing may follow
        assert _sent(hook) == [] and feishu.accepted() == [], (_sent(hook), len(feishu.accepted()))
    finally:
        job.stop()
        d.stop()
        feishu.stop()
        hook.stop()


def test_a_relaunch_into_files_read_and_forgotten_does_not_page_their_oom_again(tmp_path):
    env, scenario = fake_npu_smi(tmp_path)
    feishu, hook = Receiver("feishu").start(), Receiver("webhook").start()
    tag = f"t-relfor{os.getpid()}"
    port = str(29500 + os.getpid() % 100)
    first = TrainJob(tmp_path / "job", ranks=2, tag=tag, port=port, env={"NPU_WATCHDOG_JOB": "first-run"})
    over = {"discovery": {"forget_after": "5s"}}
    d = ShippedDaemon(tmp_path / "d", env, f"{TAG}={tag}", feishu.url, hook.url, overrides=over)
    relaunch = None
    try:
        wait_for(lambda: d.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        first.start()
        write_scenario(scenario, first.rank_pids())
        wait_for(lambda: _followed(d, 2), timeout=90, what="both rank files followed")
        (first.ctl / "quit-1").touch()
        (first.ctl / "npuoom-0").touch()  # rank 0 dies of NPU OOM, rank 1 leaves
        first.proc.wait(30)
        write_scenario(scenario, [])
        wait_for(lambda: ("firing", "log_oom", "first-run") in _sent(hook), timeout=90, what="the OOM's page")
        wait_for(lambda: _followed(d, 0), timeout=120, what="the ended job's files forgotten")
        d.stop()  # the remembered position must survive a restart
        d = ShippedDaemon(tmp_path / "d", env, f"{TAG}={tag}", feishu.url, hook.url, overrides=over)
        wait_for(lambda: d.status()["discovery"]["enabled"], timeout=60, what="daemon up again")
        relaunch = _run_clean(TrainJob(tmp_path / "job", ranks=2, tag=tag, port=port,
                                       env={"NPU_WATCHDOG_JOB": "relaunch"}), scenario)
        wait_for(lambda: _followed(d, 2), timeout=90, what="the relaunch's files followed")
        for name in ("npuoom-0", "quit-1"):  # the same control folder: the relaunch trains on
            (relaunch.ctl / name).unlink()
        (relaunch.ctl / "hang").unlink()
        wait_for(lambda: (relaunch.logs / "rank1.log").read_text().count(" iteration ") > 30, timeout=30,
                 what="training")
        (relaunch.ctl / "finish").touch()
        assert relaunch.proc.wait(30) == 0
        wait_for(lambda: any(f["rule"] == "job_finished" and f["labels"].get("training_job") == "relaunch"
                             for f in d.status()["findings"]), timeout=90, what="the relaunch's clean end")
        time.sleep(5)
        assert [s for s in _sent(hook) if s[2] == "relaunch"] == [], _sent(hook)
        assert _sent(hook).count(("firing", "log_oom", "first-run")) == 1, _sent(hook)
    finally:
        first.stop()
        if relaunch is not None:
            relaunch.stop()
        d.stop()
        feishu.stop()
        hook.stop()


def test_a_relaunch_seconds_after_a_failure_is_judged_on_its_own_lines(tmp_path):
    """A retry loop relaunches the job seconds after its rank died of an OOM, into the same
    `--log-dir` (appending); the relaunch is cancelled soon after (the group SIGTERMed). Its end
    is judged on its own lines: `stopped` (a warning, "cancelled or preempted?"), not the earlier
    run's OOM, which lies within the tail the end judgement reads. Before, a file written less
    than a minute before the relaunch started was read from the start of that tail."""
    if os.geteuid() != 0:
        pytest.skip("the kernel's process events need root")
    env, scenario = fake_npu_smi(tmp_path)
    feishu, hook = Receiver("feishu").start(), Receiver("webhook").start()
    tag = f"t-relquick{os.getpid()}"
    port = str(29300 + os.getpid() % 100)
    first = TrainJob(tmp_path / "job", ranks=2, tag=tag, port=port,
                     env={"NPU_WATCHDOG_JOB": "retry-a", "FAKE_TRAIN_NO_DONE": "1", "FAKE_TRAIN_QUIET_END": "1"})
    d = ShippedDaemon(tmp_path / "d", env, f"{TAG}={tag}", feishu.url, hook.url)
    again = None
    try:
        wait_for(lambda: d.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        first.start()
        write_scenario(scenario, first.rank_pids())
        wait_for(lambda: _followed(d, 2), timeout=90, what="both rank files followed")
        (first.ctl / "quit-0").touch()
        (first.ctl / "npuoom-1").touch()
        first.proc.wait(30)
        write_scenario(scenario, [])
        wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "job_gone"
                          and f["labels"].get("training_job") == "retry-a"], timeout=90, what="the first run's end")
        for name in ("quit-0", "npuoom-1"):
            (first.ctl / name).unlink()
        again = TrainJob(tmp_path / "job", ranks=2, tag=tag, port=port,
                         env={"NPU_WATCHDOG_JOB": "retry-b", "FAKE_TRAIN_NO_DONE": "1", "FAKE_TRAIN_QUIET_END": "1"})
        again.start()
        write_scenario(scenario, again.rank_pids())
        wait_for(lambda: f'npu_watchdog_job_ranks_alive{{training_job="retry-b"}} 2.0' in d.get("/metrics"),
                 timeout=60, what="the relaunch followed")
        os.killpg(again.proc.pid, signal.SIGTERM)
        again.proc.wait(30)
        write_scenario(scenario, [])
        (gone,) = wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "job_gone"
                                    and f["labels"].get("training_job") == "retry-b"] or None,
                           timeout=90, what="the relaunch's end")
        assert gone["severity"] == "warning" and gone["details"]["verdict"]["row"] == "stopped", gone
        assert "out of memory" not in gone["summary"].lower(), gone
        assert not [s for s in _sent(hook) if s[2] == "retry-b"], _sent(hook)  # no critical page for it
    finally:
        first.stop()
        if again is not None:
            again.stop()
        d.stop()
        feishu.stop()
        hook.stop()

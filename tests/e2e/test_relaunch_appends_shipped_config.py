"""A job relaunched into the log folder of an earlier run appends to its files (torchrun's
`--log-dir` opens `rank<N>.log` for appending, as `>>` and `tee -a` do). The earlier run's OOM in
those files is not this run's and must not page it, on the shipped example config:
- files the daemon never read, last written a day before the job started (the daemon was
  installed since, or the folder was copied): read from their end when first seen;
- files the daemon read while the earlier run ran and forgot after `discovery.forget_after`:
  read on from where it stopped (`watchdog.logrules.retired`), across a daemon restart too;
- a relaunch seconds after the failure (a retry loop): its end is judged on its own lines.
Before, a file discovered after the daemon's first round was read from its beginning, and each
relaunch paged the earlier run's OOM as a new `log_oom`."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode, write_scenario

pytestmark = pytest.mark.slow
OLD_OOM = ("Traceback (most recent call last):\n  File \"train.py\", line 412, in <module>\n    loss = model(batch)\n"
           "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity; "
           "57.80 GiB already allocated; 1.02 GiB free)\n")
QUIET_END = {"FAKE_TRAIN_NO_DONE": "1", "FAKE_TRAIN_QUIET_END": "1"}


def _sent(node):
    return [(r.json["status"], a["labels"]["alertname"], a["labels"].get("training_job"))
            for r in node.hook.accepted() for a in r.json["alerts"]]


def _followed(node, n):
    return node.metric('npu_watchdog_log_files_followed{source="train"}') == float(n)


def _finding(node, rule, job):
    return [f for f in node.status()["findings"] if f["rule"] == rule and f["labels"].get("training_job") == job]


def _wait_finding(node, rule, job, what):
    """The finding, or a failure that shows what the daemon held and said instead."""
    try:
        return wait_for(lambda: _finding(node, rule, job), timeout=90, what=what)
    except AssertionError as exc:
        held = [(f["rule"], f["labels"].get("training_job"), f.get("summary")) for f in node.status()["findings"]]
        raise AssertionError(f"{exc}; findings: {held}; daemon log: {node.daemon.log_path.read_text()[-4000:]}")


def _held(job):
    """`job` held silent (its ranks blocked) once started (by `with`), until `_on_chips` is done."""
    (job.ctl / "hang").touch()
    return job


def _on_chips(node, job):
    """Its ranks on the fake chips, and the daemon following its files."""
    write_scenario(node.scenario, job.rank_pids())
    wait_for(lambda: _followed(node, job.ranks), timeout=90, what="the rank files followed")


@pytest.fixture
def make_node(tmp_path):
    """A shipped daemon (the example config, with `overrides` of time constants merged in)."""
    made = []

    def make(overrides=None):
        made.append(ShippedNode(tmp_path, overrides=overrides))
        return made[-1].wait_up()

    yield make
    for n in made:
        n.stop()


def test_a_relaunch_into_old_files_never_read_does_not_page_their_oom(make_node):
    node = make_node()
    job = node.job("relaunch-old", ranks=2, folder="job")
    for r in range(2):
        p = job.logs / f"rank{r}.log"
        p.write_text("".join(f" iteration {i:8d}/ 100000 | lm loss: 1.9 |\n" for i in range(1, 40)) + OLD_OOM)
        day = time.time() - 86400
        os.utime(p, (day, day))
    with _held(job):
        _on_chips(node, job)
        (job.ctl / "hang").unlink()
        wait_for(lambda: (job.logs / "rank0.log").read_text().count(" iteration ") > 45, timeout=30, what="training")
        (job.ctl / "finish").touch()
        assert job.proc.wait(30) == 0
        _wait_finding(node, "job_finished", "relaunch-old", "the clean end")
        time.sleep(5)  # a group window more: nothing may follow
        assert _sent(node) == [] and node.feishu.accepted() == [], (_sent(node), len(node.feishu.accepted()))


def test_a_relaunch_into_files_read_and_forgotten_does_not_page_their_oom_again(make_node):
    node = make_node({"discovery": {"forget_after": "5s"}})  # forgotten within the test
    first = node.job("first-run", ranks=2, folder="job")
    with first:
        node.follow(first, "first-run")
        (first.ctl / "quit-1").touch()
        (first.ctl / "npuoom-0").touch()  # rank 0 dies of NPU OOM, rank 1 leaves
        first.proc.wait(30)
        write_scenario(node.scenario, [])
        wait_for(lambda: ("firing", "log_oom", "first-run") in _sent(node), timeout=90, what="the OOM's page")
        wait_for(lambda: _followed(node, 0), timeout=120, what="the ended job's files forgotten")
    node.restart_daemon()  # the remembered position must survive a restart
    for name in ("npuoom-0", "quit-1"):  # the same control folder: the relaunch trains on
        (first.ctl / name).unlink()
    relaunch = node.job("relaunch", ranks=2, folder="job")
    with _held(relaunch):
        _on_chips(node, relaunch)
        (relaunch.ctl / "hang").unlink()
        wait_for(lambda: (relaunch.logs / "rank1.log").read_text().count(" iteration ") > 30, timeout=30,
                 what="training")
        (relaunch.ctl / "finish").touch()
        assert relaunch.proc.wait(30) == 0
        _wait_finding(node, "job_finished", "relaunch", "the relaunch's clean end")
        time.sleep(5)
        assert [s for s in _sent(node) if s[2] == "relaunch"] == [], _sent(node)
        assert _sent(node).count(("firing", "log_oom", "first-run")) == 1, _sent(node)


def test_a_relaunch_seconds_after_a_failure_is_judged_on_its_own_lines(make_node):
    """A retry loop relaunches the job seconds after its rank died of an OOM, into the same
    `--log-dir` (appending); the relaunch is cancelled soon after (the group SIGTERMed). Its end
    is judged on its own lines: `stopped` (a warning, "cancelled or preempted?"), not the earlier
    run's OOM, which lies within the tail the end judgement reads. Before, a file written less
    than a minute before the relaunch started was read from the start of that tail."""
    if os.geteuid() != 0:
        pytest.skip("the kernel's process events need root")
    node = make_node()
    first = node.job("retry-a", ranks=2, folder="job", **QUIET_END)
    with first:
        node.follow(first, "retry-a")
        (first.ctl / "quit-0").touch()
        (first.ctl / "npuoom-1").touch()
        first.proc.wait(30)
        write_scenario(node.scenario, [])
        wait_for(lambda: _finding(node, "job_gone", "retry-a"), timeout=90, what="the first run's end")
    for name in ("quit-0", "npuoom-1"):
        (first.ctl / name).unlink()
    again = node.job("retry-b", ranks=2, folder="job", **QUIET_END)
    with again:
        write_scenario(node.scenario, again.rank_pids())
        wait_for(lambda: node.metric('npu_watchdog_job_ranks_alive{training_job="retry-b"}') == 2.0,
                 timeout=60, what="the relaunch followed")
        os.killpg(again.proc.pid, signal.SIGTERM)
        again.proc.wait(30)
        write_scenario(node.scenario, [])
        (gone,) = wait_for(lambda: _finding(node, "job_gone", "retry-b") or None, timeout=90, what="its end")
        assert gone["severity"] == "warning" and gone["details"]["verdict"]["row"] == "stopped", gone
        assert "out of memory" not in gone["summary"].lower(), gone
        assert not [s for s in _sent(node) if s[2] == "retry-b"], _sent(node)  # no critical page for it

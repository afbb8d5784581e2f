"""The process probe and process findings against real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.liveness_kit import BUSY, NON_REAPING_PARENT, SLEEPER, Children, Harness, make_config


@pytest.fixture
def kids():
    c = Children()
    yield c
    c.close()


def test_ranks_from_environment_and_healthy_job_has_no_findings(tmp_path, kids):
    a = kids.spawn(SLEEPER, rank=1)
    b = kids.spawn(SLEEPER, rank=0)
    h = Harness(make_config(tmp_path, kids.marker, process={"expected": 2}))
    h.wait_round(lambda: len(h.processes()) == 2, what="two ranks")
    by_rank = {p.rank: p.pid for p in h.processes()}
    assert by_rank == {0: b.pid, 1: a.pid}
    assert h.findings() == []


def test_rank_by_start_order_without_environment(tmp_path, kids):
    first = kids.spawn(SLEEPER)
    time.sleep(0.05)
    second = kids.spawn(SLEEPER)
    h = Harness(make_config(tmp_path, kids.marker, process={}))
    h.wait_round(lambda: len(h.processes()) == 2, what="two ranks")
    assert {p.rank: p.pid for p in h.processes()} == {0: first.pid, 1: second.pid}


def test_cpu_delta_advances_for_a_busy_rank_and_not_for_a_sleeping_one(tmp_path, kids):
    kids.spawn(BUSY, rank=0)
    kids.spawn(SLEEPER, rank=1)
    h = Harness(make_config(tmp_path, kids.marker, process={}))
    h.round()

    def deltas():
        d = {p.rank: p.cpu_delta for p in h.processes()}
        return d if d.get(0) and d[0] >= 0.02 else None
    # Rounds 1 s apart: on a loaded machine (12 test workers on 2 cores) the busy rank gets a
    # sixth of a core or less, too little to show in rounds 0.1 s apart.
    d = h.wait_round(deltas, what="busy rank burning CPU", every=1.0)
    assert d[1] is not None and d[1] < d[0]


def test_stopped_rank(tmp_path, kids):
    kids.spawn(SLEEPER, rank=0)
    victim = kids.spawn(SLEEPER, rank=1)
    h = Harness(make_config(tmp_path, kids.marker, process={"stopped_after": "0.5s"}))
    h.wait_round(lambda: len(h.processes()) == 2)
    os.kill(victim.pid, signal.SIGSTOP)
    f = h.wait_finding("rank_stopped")
    assert f.labels == {"host": "node-t", "training_job": "job-t", "rank": "1", "pid": str(victim.pid)}
    assert f.severity == "critical"
    os.kill(victim.pid, signal.SIGCONT)
    h.wait_round(lambda: not h.find("rank_stopped"), what="stopped finding to clear")


def test_killed_rank_then_whole_job_gone(tmp_path, kids):
    keep = kids.spawn(SLEEPER, rank=0)
    victim = kids.spawn(SLEEPER, rank=1)
    h = Harness(make_config(tmp_path, kids.marker, process={"expected": 2}))
    h.wait_round(lambda: len(h.processes()) == 2)
    victim.kill()
    victim.wait()
    f = h.wait_finding("rank_missing")
    assert f.labels == {"host": "node-t", "training_job": "job-t", "rank": "1", "pid": str(victim.pid)}
    assert kids.marker in f.details["cmdline"]
    keep.kill()
    keep.wait()
    g = h.wait_finding("job_gone")
    assert g.labels == {"host": "node-t", "training_job": "job-t"}
    assert {r["pid"] for r in g.details["ranks"]} == {keep.pid, victim.pid}
    assert not h.find("rank_missing")  # one page for the crash, not one per rank


def test_zombie_rank_under_a_non_reaping_launcher(tmp_path, kids):
    parent = kids.spawn(NON_REAPING_PARENT, "1.0", stdout=subprocess.PIPE)
    child_pid = int(parent.stdout.readline())
    # Ranks are the launcher's children whose command line carries the marker.
    cfg = make_config(tmp_path, kids.marker, process={"zombie_after": "0.3s", "parent": r"import subprocess"})
    h = Harness(cfg)
    h.wait_round(lambda: [p for p in h.processes() if p.pid == child_pid], what="the rank under its launcher")
    assert [p.pid for p in h.processes()] == [child_pid]  # the launcher itself is not a rank
    f = h.wait_finding("rank_zombie")
    assert f.labels == {"host": "node-t", "training_job": "job-t", "rank": "0", "pid": str(child_pid)}
    # A zombie is not a running rank: with no other rank, the job is gone too.
    assert h.find("job_gone")


def test_pid_file_and_pid_reuse_by_start_time(tmp_path, kids):
    p = kids.spawn(SLEEPER, rank=0)
    pid_file = tmp_path / "ranks.pid"
    pid_file.write_text(f"{p.pid}\n")
    cfg = make_config(tmp_path, "unused", process={"pid_file": str(pid_file), "cmdline": None})
    h = Harness(cfg)
    h.wait_round(lambda: len(h.processes()) == 1)
    assert h.processes()[0].pid == p.pid
    # The same pid now seen with another start time is another process: the rank is gone.
    probe = h.probes[0]
    (ident, info), = probe._known.items()
    probe._known = {(ident[0], ident[1] - 100.0): info}
    # ... and a pid file older than the process it names points at a reused pid: not our rank.
    created = psutil.Process(p.pid).create_time()
    os.utime(pid_file, (created - 60, created - 60))
    h.round()
    assert h.processes() == ()
    assert [g.pid for g in h.last["process"].gone] == [p.pid]
    assert h.find("job_gone")
    # Rewriting the pid file (a fresh launch) makes it count again.
    pid_file.write_text(f"{p.pid}\n")
    h.round()
    assert [x.pid for x in h.processes()] == [p.pid]


def test_not_started_after_grace(tmp_path, kids):
    h = Harness(make_config(tmp_path, kids.marker, process={"start_grace": "0.3s"}))
    h.round()
    f = h.wait_finding("process_not_started")
    assert f.labels == {"host": "node-t", "training_job": "job-t"} and f.details["source"] == "process"
    kids.spawn(SLEEPER, rank=0)
    h.wait_round(lambda: not h.find("process_not_started"), what="the job to start")


def test_bad_pid_file_is_a_clear_probe_error(tmp_path):
    from watchdog.probes.base import ProbeError
    bad = tmp_path / "x.pid"
    bad.write_text("12ab\n")
    cfg = make_config(tmp_path, "m", process={"pid_file": str(bad)})
    h = Harness(cfg)
    with pytest.raises(ProbeError, match=r"line 1: expected a pid"):
        h.round()

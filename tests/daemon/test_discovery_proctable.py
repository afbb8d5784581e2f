"""The discovery scan reads the command line and environment only of processes it has not seen,
and the `stat` only of the processes a job is made of (and a share of the others each scan).

Counted, not timed, on the real /proc with real processes (and on procfs trees built by hand where
the kernel cannot be made to do it): a second scan of an unchanged process reads at most its `stat`;
a process that exec's (same pid, new program and environment) is read again, at once when it is a
rank or an ancestor of one, or was read young (a launcher's child between fork and exec), within
`rotate` scans for other processes with a new command name, else at the next full read; a pid taken
over by a new process is read at once; a rank that turned zombie is no longer a record. The machine
may start other processes meanwhile, so the counts are checked against the pids each scan found new.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ProcView, wait_for
from watchdog.discovery import procfs
from watchdog.discovery.environ import wanted_keys

KEYS = wanted_keys(("NPU_WATCHDOG_JOB",))

#: Waits for a file, then becomes `sleep` with RANK=7 (same pid: an exec).
EXECS = r"""
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
os.execve("/bin/sleep", ["sleep", "100"], dict(os.environ, RANK="7"))
"""


def execed(pid: int, program: str) -> bool:
    """The exec of `program` is complete: its command line is readable. Why: the kernel sets the
    name (comm) and closes Popen's exec pipe before it sets up the new command line, and a scan
    with `settled=0` that reads the empty one in that window takes the process for a kernel
    thread for good (a loaded machine widens the window)."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().split(b"\0")[0] == program.encode()


@pytest.fixture
def reads(monkeypatch):
    """The pids whose command line was read, in order."""
    seen = []
    real = procfs._read

    def counting(path, limit=1 << 20):
        if path.endswith("/cmdline"):
            seen.append(int(path.split("/")[-2]))
        return real(path, limit)

    monkeypatch.setattr(procfs, "_read", counting)
    return seen


def test_a_second_scan_reads_only_new_processes(tmp_path, reads):
    env = dict(os.environ, RANK="3", NPU_WATCHDOG_JOB="t-job")
    first = subprocess.Popen(["sleep", "100"], env=env)
    others = [subprocess.Popen(["sleep", "100"]) for _ in range(3)]
    view = ProcView(tmp_path / "proc", [first.pid, os.getpid()] + [p.pid for p in others])
    table = procfs.ProcTable(settled=0.0)  # (a young process is read again: see below)
    try:
        for p in [first] + others:
            wait_for(lambda: execed(p.pid, "sleep"), what="sleep started")
        before = table.read(KEYS, view.path)
        assert before[first.pid].env["RANK"] == "3" and before[first.pid].env["NPU_WATCHDOG_JOB"] == "t-job"
        assert sorted(reads) == sorted(before) == sorted([first.pid, os.getpid()] + [p.pid for p in others])

        reads.clear()
        second = subprocess.Popen(["sleep", "100"], env=dict(env, RANK="4"))
        wait_for(lambda: execed(second.pid, "sleep"), what="sleep started")
        view.add(second.pid)
        after = table.read(KEYS, view.path)
        assert after[second.pid].env["RANK"] == "4" and after[first.pid] == before[first.pid]
        assert reads == [second.pid], reads  # only the process this scan had not seen
        second.kill()
        second.wait()
    finally:
        for p in [first] + others:
            p.kill()
            p.wait()


def test_a_process_that_execs_is_read_again_and_a_zombie_is_gone(tmp_path, reads):
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", EXECS, str(go)], env={k: v for k, v in os.environ.items()
                                                                          if k != "RANK"})
    view = ProcView(tmp_path / "proc", [proc.pid])
    table = procfs.ProcTable()
    try:
        wait_for(lambda: proc.pid in table.read(KEYS, view.path), what="the python process")
        assert "RANK" not in table.read(KEYS, view.path)[proc.pid].env
        go.write_text("")
        wait_for(lambda: execed(proc.pid, "sleep"), what="the exec")
        reads.clear()
        rec = table.read(KEYS, view.path)[proc.pid]
        assert rec.cmdline == ("sleep", "100") and rec.env["RANK"] == "7" and proc.pid in reads

        proc.kill()  # not reaped yet: a zombie
        wait_for(lambda: open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                 what="the zombie")
        # A rank is looked at in turn (the process probe follows it every round): gone within `rotate` scans.
        assert any(proc.pid not in table.read(KEYS, view.path) for _ in range(table.rotate))
    finally:
        proc.kill()
        proc.wait()


def test_logs_and_heartbeat_reuse_the_process_rounds_scan_despite_its_jitter():
    """The process probe rescans every interval plus up to `probes.jitter`: a logs round just
    before it reuses the last scan instead of making a second one (each scan walks /proc)."""
    from watchdog.config.schema import Config
    from watchdog.discovery.feed import feed_for

    cfg = Config.model_validate({"probes": {"jitter": "1s"},
                                 "discovery": {"enabled": True, "interval": "10s",
                                               "only_env": "NPU_WATCHDOG_TEST_MARK=none"}})
    feed = feed_for(cfg)
    first = feed.refresh()
    # As if the scan were a little older than the interval: the process round is due within its jitter.
    assert feed.current(max_age=0.0) is first and feed.scans_total == 1


#: Waits for a file, then execs python again (the same command name) with RANK=5: like a
#: launcher's child caught between its fork and its exec.
SAME_NAME = r"""
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(100)"], dict(os.environ, RANK="5"))
"""


@pytest.mark.parametrize("how", ["young", "full"])
def test_an_exec_under_the_same_command_name_is_seen(tmp_path, how):
    """Read while young (it may not have exec'd yet): read again. Read when settled: the periodic
    full read finds the exec within `full_every` scans."""
    go = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    proc = subprocess.Popen([sys.executable, "-c", SAME_NAME, str(go)], env=env)
    table = (procfs.ProcTable(settled=3600.0, full_every=0) if how == "young"
             else procfs.ProcTable(settled=0.0, full_every=3))
    view = ProcView(tmp_path / "proc", [proc.pid])
    try:
        wait_for(lambda: proc.pid in table.read(KEYS, view.path), what="the python process")  # scan 1 (or more)
        assert "RANK" not in table.read(KEYS, view.path)[proc.pid].env
        go.write_text("")
        # (the program before the exec names the new one too: compare the whole argument)
        wait_for(lambda: open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\0")[1:3]
                 == [b"-c", b"import time; time.sleep(100)"], what="the exec")
        before = table.scans
        seen = [table.read(KEYS, view.path)[proc.pid].env.get("RANK") for _ in range(3)]
        if how == "young":
            assert seen == ["5"] * 3, seen
        else:  # settled at once: its record is kept until the next full read (every third scan)
            stale = next(i for i in range(3) if (before + i + 1) % 3 == 0)
            assert seen == [None] * stale + ["5"] * (3 - stale), (before, seen)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def stats(monkeypatch):
    """The pids whose `stat` was read, scan by scan (a list per `read`)."""
    per_scan: list = []
    real = procfs._stat_of

    def counting(pid, proc):
        per_scan[-1].append(pid)
        return real(pid, proc)

    monkeypatch.setattr(procfs, "_stat_of", counting)
    return per_scan


def test_a_scan_reads_the_stat_of_the_ancestors_of_ranks_and_a_third_of_the_rest(tmp_path, stats):
    """Counted on real processes (a /proc view that shows only this test's): after the first
    scan, the ancestors of rank-marked processes are looked at every scan, other user processes
    (the ranks too) once in `rotate` scans, kernel threads never."""
    rank = subprocess.Popen(["sleep", "100"], env=dict(os.environ, RANK="3", NPU_WATCHDOG_JOB="t-job"))
    others = [subprocess.Popen(["sleep", "100"]) for _ in range(6)]
    kernel = {pid for pid in (2,) if os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/cmdline").read() == ""}
    view = ProcView(tmp_path / "proc", [rank.pid, os.getpid()] + [p.pid for p in others] + sorted(kernel))
    table = procfs.ProcTable(settled=0.0, full_every=0, rotate=3)
    try:
        for p in [rank] + others:
            wait_for(lambda: execed(p.pid, "sleep"), what="sleep started")
        stats.append([])
        first = table.read(KEYS, view.path)
        assert first[rank.pid].env["RANK"] == "3" and not kernel & set(first)
        assert procfs.watch_set(first) == {os.getpid()}, "the rank's parent is this test's process"
        for _ in range(3):
            stats.append([])
            table.read(KEYS, view.path)
        later = [set(s) for s in stats[1:]]
        assert all(s >= {os.getpid()} for s in later), "ancestors of ranks: every scan"
        counts = {pid: sum(pid in s for s in later) for pid in set(first) - {os.getpid()}}
        assert counts == {pid: 1 for pid in [rank.pid] + [p.pid for p in others]}, "once in 3 scans"
        assert not any(kernel & s for s in later), "kernel threads are skipped"
    finally:
        for p in [rank] + others:
            p.kill()
            p.wait()


def test_a_settled_unmarked_process_that_execs_into_a_rank_is_found_within_rotate_scans(tmp_path):
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", EXECS, str(go)], env={k: v for k, v in os.environ.items()
                                                                          if k != "RANK"})
    view = ProcView(tmp_path / "proc", [proc.pid])
    table = procfs.ProcTable(settled=0.0, full_every=0, rotate=3)
    try:
        wait_for(lambda: execed(proc.pid, sys.executable), what="the python process started")
        wait_for(lambda: proc.pid in table.read(KEYS, view.path), what="the python process")
        table.read(KEYS, view.path)  # now known and settled: looked at once in 3 scans
        go.write_text("")
        wait_for(lambda: execed(proc.pid, "sleep"), what="the exec")
        seen = [table.read(KEYS, view.path)[proc.pid].env.get("RANK") for _ in range(3)]
        assert "7" in seen and seen[seen.index("7"):] == ["7"] * (3 - seen.index("7")), seen
    finally:
        proc.kill()
        proc.wait()


def _fake_process(root, pid: int, start: int, env: str, comm: str = "python3") -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_text(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n")
    (d / "cmdline").write_bytes(b"python3\0train.py\0")
    (d / "environ").write_bytes(env.encode() + b"\0")


def test_a_pid_taken_over_by_a_new_process_is_read_at_once(tmp_path):
    """A pid whose folder is a new one (a new inode) is read at the next scan, even when it is not
    its turn to be looked at: here an unmarked process ends and a rank takes its pid."""
    (tmp_path / "uptime").write_text("100000.00 1.00\n")
    _fake_process(tmp_path, 4242, start=100, env="HOME=/x")
    table = procfs.ProcTable(settled=0.0, full_every=0, rotate=1000)
    assert table.read(KEYS, str(tmp_path))[4242].env.get("RANK") is None
    assert table.read(KEYS, str(tmp_path))[4242].env.get("RANK") is None
    looked = table.stats_read
    table.read(KEYS, str(tmp_path))
    assert table.stats_read == looked, "not its turn: no stat read"
    # The old folder is moved aside, not deleted, so its inode stays taken: the new one surely has
    # another (a deleted one's number can be reused at once while other tests create files).
    (tmp_path / "4242").rename(tmp_path / "ended-4242")
    _fake_process(tmp_path, 4242, start=200, env="RANK=5")
    assert table.read(KEYS, str(tmp_path))[4242].env.get("RANK") == "5"


def test_an_unchanged_table_reuses_the_jobs_and_a_change_is_seen_at_once(tmp_path, monkeypatch):
    """Grouping and describing the jobs is done again only when a record changed (counted, on a
    procfs tree built by hand); a rank that turns zombie leaves its job at the next scan."""
    from watchdog.discovery import scan as scan_mod

    calls = []
    real = scan_mod.describe_job
    monkeypatch.setattr(scan_mod, "describe_job", lambda *a, **k: calls.append(1) or real(*a, **k))
    (tmp_path / "uptime").write_text("100000.00 1.00\n")
    for pid, rank in ((300, 0), (301, 1)):
        _fake_process(tmp_path, pid, start=100, env=f"RANK={rank}\0MASTER_ADDR=n1\0MASTER_PORT=29500")
    opts = scan_mod.ScanOptions(proc=str(tmp_path), home_of=lambda uid: None)
    table = procfs.ProcTable(settled=0.0, full_every=0, rotate=3)
    first = scan_mod.discover(opts, None, table)  # scan 1
    assert [r.pid for r in first.jobs[0].ranks] == [300, 301] and calls == [1]
    assert scan_mod.discover(opts, None, table).jobs == first.jobs and calls == [1]  # scan 2: reused
    scan_mod.discover(opts, None, table)  # scan 3: described again (logs and owners are due)
    assert scan_mod.discover(opts, None, table).jobs == first.jobs and calls == [1, 1]  # scan 4: reused
    stat = tmp_path / "301" / "stat"
    stat.write_text(stat.read_text().replace(") S ", ") Z "))
    seen = [[r.pid for r in scan_mod.discover(opts, None, table).jobs[0].ranks] for _ in range(3)]
    gone = seen.index([300])  # at its turn, within `rotate` scans; described again at once
    assert seen[gone:] == [[300]] * (3 - gone) and len(calls) >= 3


def test_a_ranks_new_log_file_is_seen_within_rotate_scans(tmp_path):
    """A rank's log files are listed again every `rotate` scans (docs/discovery.md, Cost), also
    when the jobs were described again in between (a new rank, here at scan 2) and the jobs are
    otherwise reused: a rank that reopens its stdout onto a new file is seen on it by then."""
    from watchdog.discovery import scan as scan_mod

    (tmp_path / "uptime").write_text("100000.00 1.00\n")
    old_log, new_log = tmp_path / "old.log", tmp_path / "new.log"
    old_log.write_text("")
    new_log.write_text("")
    _fake_process(tmp_path, 300, start=100, env="RANK=0\0MASTER_ADDR=n1\0MASTER_PORT=29500")
    (tmp_path / "300" / "fd").mkdir()
    os.symlink(str(old_log), tmp_path / "300" / "fd" / "1")
    opts = scan_mod.ScanOptions(proc=str(tmp_path), home_of=lambda uid: None)
    table = procfs.ProcTable(settled=0.0, full_every=0, rotate=3)
    assert scan_mod.discover(opts, None, table).jobs[0].ranks[0].logs == (str(old_log),)  # scan 1
    _fake_process(tmp_path, 301, start=100, env="RANK=1\0MASTER_ADDR=n1\0MASTER_PORT=29500")
    assert len(scan_mod.discover(opts, None, table).jobs[0].ranks) == 2  # scan 2: described again
    os.unlink(tmp_path / "300" / "fd" / "1")
    os.symlink(str(new_log), tmp_path / "300" / "fd" / "1")  # just after its logs were listed
    seen = [scan_mod.discover(opts, None, table).jobs[0].ranks[0].logs for _ in range(3)]  # scans 3-5
    assert (str(new_log),) in seen, seen


def test_a_process_whose_record_cannot_be_parsed_is_skipped_and_counted(tmp_path):
    """A procfs tree built by hand (the kernel never writes a stat line like this): the process
    is left out and counted in `skipped` (npu_watchdog_discovery_processes_skipped), the rank
    beside it is discovered, and a rank whose environment is hostile keeps only its good values."""
    from watchdog.discovery import scan as scan_mod

    (tmp_path / "uptime").write_text("100000.00 1.00\n")
    _fake_process(tmp_path, 300, start=100, env="RANK=0\0MASTER_ADDR=n1\0MASTER_PORT=29500")
    _fake_process(tmp_path, 301, start=100, env="RANK=1\0LOCAL_RANK=\u00b2\0ASCEND_RT_VISIBLE_DEVICES=\u00b2,1\0"
                                                  "MASTER_ADDR=n1\0MASTER_PORT=29500")
    _fake_process(tmp_path, 302, start=100, env="RANK=2\0MASTER_ADDR=n1\0MASTER_PORT=29500")
    (tmp_path / "302" / "stat").write_text("302 (python3) S \u00b2 x\n")
    opts = scan_mod.ScanOptions(proc=str(tmp_path), home_of=lambda uid: None)
    found = scan_mod.discover(opts, None, procfs.ProcTable(settled=0.0, full_every=0))
    ranks = {r.pid: r for j in found.jobs for r in j.ranks}
    assert sorted(ranks) == [300, 301] and found.skipped == 1
    assert ranks[301].local_rank is None and ranks[301].npu is None

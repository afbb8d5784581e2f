"""The discovery scan reads the command line and environment only of processes it has not seen.

Counted, not timed, on the real /proc with real processes: a second scan of an unchanged process
reads nothing but its `stat`; a process that exec's (same pid, new program and environment) is
read again, at once when the command name changes or when it was read young (a launcher's child
between fork and exec), else at the next full read; one that turned zombie is no longer a record. The machine may start other processes
meanwhile, so the counts are checked against the pids each scan found new.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import wait_for
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


def test_a_second_scan_reads_only_new_processes(reads):
    env = dict(os.environ, RANK="3", NPU_WATCHDOG_JOB="t-job")
    first = subprocess.Popen(["sleep", "100"], env=env)
    table = procfs.ProcTable(settled=0.0)  # (a young process is read again: see below)
    try:
        wait_for(lambda: open(f"/proc/{first.pid}/comm").read().strip() == "sleep", what="sleep started")
        before = table.read(KEYS)
        assert before[first.pid].env["RANK"] == "3" and before[first.pid].env["NPU_WATCHDOG_JOB"] == "t-job"
        # (a process may vanish between its stat and its command line: read, but no record)
        assert table.records_read >= len(reads) >= len(before)

        reads.clear()
        second = subprocess.Popen(["sleep", "100"], env=dict(env, RANK="4"))
        wait_for(lambda: open(f"/proc/{second.pid}/comm").read().strip() == "sleep", what="sleep started")
        after = table.read(KEYS)
        assert after[second.pid].env["RANK"] == "4" and after[first.pid] == before[first.pid]
        assert first.pid not in reads and second.pid in reads
        # Only processes this scan had not seen: other work on the machine may start processes,
        # or exec (a new command name) or end (its pid taken by a new one) some it had seen.
        ident = lambda r: (r.start_ticks, r.name, r.uid)  # noqa: E731
        again = [p for p in set(reads) & set(before) if p in after and ident(after[p]) == ident(before[p])]
        assert again == [], again
        second.kill()
        second.wait()
    finally:
        first.kill()
        first.wait()


def test_a_process_that_execs_is_read_again_and_a_zombie_is_gone(tmp_path, reads):
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", EXECS, str(go)], env={k: v for k, v in os.environ.items()
                                                                          if k != "RANK"})
    table = procfs.ProcTable()
    try:
        wait_for(lambda: proc.pid in table.read(KEYS), what="the python process")
        assert "RANK" not in table.read(KEYS)[proc.pid].env
        go.write_text("")
        wait_for(lambda: open(f"/proc/{proc.pid}/comm").read().strip() == "sleep", what="the exec")
        reads.clear()
        rec = table.read(KEYS)[proc.pid]
        assert rec.cmdline == ("sleep", "100") and rec.env["RANK"] == "7" and proc.pid in reads

        proc.kill()  # not reaped yet: a zombie
        wait_for(lambda: open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                 what="the zombie")
        assert proc.pid not in table.read(KEYS)
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
    try:
        wait_for(lambda: proc.pid in table.read(KEYS), what="the python process")  # scan 1 (or more)
        assert "RANK" not in table.read(KEYS)[proc.pid].env
        go.write_text("")
        # (the program before the exec names the new one too: compare the whole argument)
        wait_for(lambda: open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\0")[1:3]
                 == [b"-c", b"import time; time.sleep(100)"], what="the exec")
        before = table.scans
        seen = [table.read(KEYS)[proc.pid].env.get("RANK") for _ in range(3)]
        if how == "young":
            assert seen == ["5"] * 3, seen
        else:  # settled at once: its record is kept until the next full read (every third scan)
            stale = next(i for i in range(3) if (before + i + 1) % 3 == 0)
            assert seen == [None] * stale + ["5"] * (3 - stale), (before, seen)
    finally:
        proc.kill()
        proc.wait()

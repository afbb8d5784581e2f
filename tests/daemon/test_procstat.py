"""watchdog.host.procstat against real processes: the same values psutil gives, from one stat read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests.helpers import wait_for
from watchdog.host import procstat
from watchdog.host.procstat import long_name, parse_stat, read_cmdline, read_rss, read_stat

#: Sets its own command name (one only a thread of the process may set), says so, then sleeps.
RENAMED = ("import sys, time\n"
           "open('/proc/self/comm', 'w').write(sys.argv[1])\n"
           "print('ready', flush=True)\n"
           "time.sleep(600)\n")


def renamed(procs, comm: str) -> subprocess.Popen:
    p = procs([sys.executable, "-c", RENAMED, comm], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    return p


def wait_exec(pid: int, argv: list) -> None:
    """Until the exec is through: the command name changes before the command line is set."""
    wait_for(lambda: read_cmdline(pid) == argv, what=f"exec of {argv[0]}")


def as_psutil_sees_it(pid: int):
    p = psutil.Process(pid)
    with p.oneshot():
        t = p.cpu_times()
        return (p.pid, p.name(), p.status(), p.ppid(), p.create_time(), float(t.user + t.system),
                p.num_threads(), p.memory_info().rss)


def as_procstat_sees_it(pid: int):
    st = read_stat(pid)
    return (st.pid, long_name(st.comm, read_cmdline(pid)), st.state, st.ppid, st.create_time, st.cpu_seconds,
            st.threads, read_rss(pid))


def under_one_boot_time(read):
    """`read()` (procstat's and psutil's readings) under one boot time. The kernel's `btime` is
    the wall clock minus the uptime, rounded to a second, so it flips between two neighbouring
    seconds as a VM's clock is adjusted (seen here, minutes apart). procstat reads it once per
    process (a rank's start time must not move between rounds); psutil reads it on every call. A
    worker that read it before a flip saw create times 1 s apart: read it afresh, and again if it
    flipped meanwhile."""
    for _ in range(3):
        before = psutil.boot_time()
        procstat._boot.clear()
        got = read()
        if psutil.boot_time() == before:
            return got
    pytest.fail("the kernel's boot time changed during three readings in a row")


@pytest.mark.parametrize("comm", ["a b) (c) d", "x)", "(", ") S 1 2 3"])
def test_command_names_with_spaces_and_parentheses(procs, comm):
    p = renamed(procs, comm)
    with open(f"/proc/{p.pid}/stat", "rb") as fh:
        text = fh.read()
    assert comm.encode() in text  # the kernel kept it as given (at most 15 bytes)
    st = parse_stat(text, boot=0.0)
    assert (st.pid, st.comm, st.ppid) == (p.pid, comm, os.getpid())
    os.kill(p.pid, signal.SIGSTOP)  # nothing moves while both read
    wait_for(lambda: read_stat(p.pid).state == "stopped", what="stopped")
    ours, theirs = under_one_boot_time(lambda: (as_procstat_sees_it(p.pid), as_psutil_sees_it(p.pid)))
    assert ours == theirs


def test_values_equal_psutil_for_live_processes(procs):
    # Idle or stopped processes, so nothing changes between the two reads: this process's
    # parent, a sleeping `sleep` and a stopped multi-threaded Python.
    sleeper = procs(["sleep", "600"])
    threads = procs([sys.executable, "-c", "import threading, time\n"
                     "for _ in range(3): threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
                     "print('ready', flush=True); time.sleep(600)\n"], stdout=subprocess.PIPE, text=True)
    assert threads.stdout.readline() == "ready\n"
    os.kill(threads.pid, signal.SIGSTOP)
    wait_for(lambda: read_stat(threads.pid).state == "stopped", what="stopped")
    wait_exec(sleeper.pid, ["sleep", "600"])
    wait_for(lambda: read_stat(sleeper.pid).state == "sleeping", what="asleep")
    for pid in (sleeper.pid, threads.pid):
        ours, theirs = under_one_boot_time(lambda: (as_procstat_sees_it(pid), as_psutil_sees_it(pid)))
        assert ours == theirs
    assert read_stat(threads.pid).threads == 4
    for pid in (os.getppid(), 1):
        ours, theirs = under_one_boot_time(lambda: (read_stat(pid).create_time, psutil.Process(pid).create_time()))
        assert ours == theirs


def test_stopped_and_zombie_states(procs):
    sleeper = procs(["sleep", "600"])
    os.kill(sleeper.pid, signal.SIGSTOP)
    wait_for(lambda: read_stat(sleeper.pid).state == "stopped", what="stopped")
    assert psutil.Process(sleeper.pid).status() == psutil.STATUS_STOPPED

    short = procs(["true"])  # exits at once and is not reaped (no wait): a zombie
    wait_for(lambda: read_stat(short.pid).state == "zombie", what="zombie")
    assert psutil.Process(short.pid).status() == psutil.STATUS_ZOMBIE
    ours, theirs = under_one_boot_time(lambda: (read_stat(short.pid).create_time,
                                                psutil.Process(short.pid).create_time()))
    assert ours == theirs
    assert (read_rss(short.pid), read_cmdline(short.pid)) == (0, [])


def test_long_command_name_is_the_full_program_name_as_psutil_gives(procs, tmp_path):
    # The kernel keeps 15 characters of the program name; psutil (and so the probe) shows the
    # full one from the command line.
    prog = tmp_path / "sleep_for_a_long_while"
    os.symlink("/bin/sleep", prog)
    p = procs([str(prog), "600"])
    wait_exec(p.pid, [str(prog), "600"])
    assert read_stat(p.pid).comm == "sleep_for_a_lon"
    assert long_name(read_stat(p.pid).comm, read_cmdline(p.pid)) == "sleep_for_a_long_while"
    assert psutil.Process(p.pid).name() == "sleep_for_a_long_while"


def test_command_line_split_as_psutil_splits_it(procs, tmp_path, monkeypatch):
    p = procs(["sleep", "600"])
    wait_exec(p.pid, ["sleep", "600"])
    assert psutil.Process(p.pid).cmdline() == ["sleep", "600"]
    # Programs that rewrote their title (spaces, no NULs), and a zombie's empty one, through
    # psutil's own Linux reader pointed at the same files.
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    from psutil._pslinux import Process as LinuxProcess

    for pid, raw in enumerate([b"a\0b c\0", b"title with spaces", b"title with spaces\0", b"one\0", b"x\0\0y\0"], 1):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(raw)
        assert read_cmdline(pid, str(tmp_path)) == LinuxProcess(pid).cmdline(), raw
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "cmdline").write_bytes(b"")
    assert read_cmdline(9, str(tmp_path)) == []


def test_gone_and_malformed():
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: the pid is free
    with pytest.raises(OSError):
        read_stat(child.pid)
    with pytest.raises(OSError):
        read_rss(child.pid)
    with pytest.raises(ValueError):
        parse_stat(b"garbage without parentheses", boot=0.0)
    with pytest.raises(ValueError):
        parse_stat(b"12 (short) S 1 2", boot=0.0)


def test_parse_stat_fields():
    # proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss ...
    line = (b"4242 (python (rank) 0) S 4000 4242 4242 0 -1 4194560 10 0 0 0 "
            b"250 150 0 0 20 0 7 0 987654 1000000 300 18446744073709551615\n")
    st = parse_stat(line, boot=1000.0)
    ticks = os.sysconf("SC_CLK_TCK")
    assert (st.pid, st.comm, st.state, st.ppid, st.threads, st.start_ticks) == (
        4242, "python (rank) 0", "sleeping", 4000, 7, 987654)
    assert st.cpu_seconds == 250 / ticks + 150 / ticks
    assert st.create_time == 987654 / ticks + 1000.0
    assert parse_stat(line.replace(b") S", b") t"), 0.0).state == "tracing-stop"
    assert parse_stat(line.replace(b") S", b") Q"), 0.0).state == "?"

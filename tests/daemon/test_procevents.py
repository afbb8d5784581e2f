"""The process-events listener, against the real kernel connector (root only): exit statuses of
processes the daemon did not start arrive, and the kernel-side filter keeps every other event
(forks, execs, thread exits) from waking the daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.helpers import wait_for
from watchdog.host.procevents import ProcExits, exit_filter

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the kernel's process events are readable by root only")


@pytest.fixture
def events():
    ev = ProcExits.start()
    if ev.unavailable is not None:
        pytest.skip(f"process events unavailable here: {ev.unavailable}")
    yield ev
    ev.close()


def test_the_filter_programs_sizes():
    assert len(exit_filter()) == 10 * 8
    assert len(exit_filter([5, 6, 6])) == (9 + 2 * 2 + 1) * 8


def test_exit_statuses_of_a_grandchild_arrive_with_their_status(events):
    # The shell's children are not ours: exactly the case of a rank under a launcher.
    out = subprocess.run(["sh", "-c", "sh -c 'exit 7' & echo $!; wait"], capture_output=True, text=True, check=False)
    code_pid = int(out.stdout.split()[0])
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert wait_for(lambda: events.get(code_pid) is not None and events.get(killed.pid) is not None, 10)
    assert os.WEXITSTATUS(events.get(code_pid).status) == 7
    assert os.WIFSIGNALED(events.get(killed.pid).status) and os.WTERMSIG(events.get(killed.pid).status) == 9


def test_forks_execs_and_thread_exits_never_reach_the_daemon(events):
    assert events.unfiltered is None, events.unfiltered
    threads = [threading.Thread(target=lambda: None) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    procs = [subprocess.Popen(["true"]) for _ in range(10)]
    for p in procs:
        p.wait()
    assert wait_for(lambda: all(events.get(p.pid) is not None for p in procs), 10)
    # Every datagram that woke the listener was a process exit: 50 thread exits, 10 forks and
    # 10 execs of ours (and whatever else the machine ran) were dropped in the kernel.
    assert events.datagrams == events.received


def test_a_watched_set_lets_only_its_exits_through(events):
    watched = subprocess.Popen(["sleep", "60"])
    events.watch([watched.pid])
    assert events.unfiltered is None, events.unfiltered
    others = [subprocess.Popen(["true"]) for _ in range(10)]
    for p in others:
        p.wait()
    watched.kill()
    watched.wait()
    assert wait_for(lambda: events.get(watched.pid) is not None, 10)
    assert os.WTERMSIG(events.get(watched.pid).status) == 9
    # Our other ten exits (and the whole host's) were dropped in the kernel.
    assert all(events.get(p.pid) is None for p in others)
    assert events.datagrams == events.received


def test_an_empty_watched_set_wakes_the_listener_for_nothing():
    # Watched from the first event on: the host's other exits (a parallel test run's) never
    # reach this socket, so none can overrun it and take the one this test waits for.
    events = ProcExits.start(pids=[])
    if events.unavailable is not None:
        pytest.skip(f"process events unavailable here: {events.unavailable}")
    before = events.datagrams
    procs = [subprocess.Popen(["true"]) for _ in range(10)]
    for p in procs:
        p.wait()
    probe = subprocess.Popen(["sleep", "60"])
    events.watch([probe.pid])  # a later watched exit still arrives: the filter was replaced
    probe.kill()
    probe.wait()
    assert wait_for(lambda: events.get(probe.pid) is not None, 10)
    assert all(events.get(p.pid) is None for p in procs)
    assert events.datagrams - before == 1
    events.close()


def test_a_burst_that_overruns_the_buffer_loses_events_not_the_listener(monkeypatch):
    """ENOBUFS (the kernel dropped events while the buffer was full) once ended the listener for
    good on a busy node. A socket with the kernel's smallest buffer and nobody reading it while
    300 processes exit overruns for certain; the reader started then must see the overrun, grow
    its buffer and go on reading. (The socket hears every exit on the machine: while other work
    keeps overrunning the small buffer, one later exit may be dropped too, so later exits are
    started until one is seen; a dead listener sees none.)"""
    monkeypatch.setattr("watchdog.host.procevents.RCVBUF", 0)  # the kernel's minimum: ~30 events
    ev = ProcExits.start(listen=False)
    if ev.unavailable is not None:
        pytest.skip(f"process events unavailable here: {ev.unavailable}")
    try:
        smallest = ev.rcvbuf
        subprocess.run(["sh", "-c", "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done"], check=True)
        ev.listen()
        assert wait_for(lambda: ev.overruns >= 1, 30)
        assert ev.rcvbuf >= 4 * smallest > 0, (smallest, ev.rcvbuf)

        later: list = []

        def a_later_exit_seen() -> bool:  # one more exit per poll; any of them seen will do
            proc = subprocess.Popen(["sh", "-c", "exit 3"])
            proc.wait()
            later.append(proc.pid)
            return any(ev.get(pid) is not None for pid in later)

        assert wait_for(a_later_exit_seen, 60)
        assert ev.unavailable is None
    finally:
        ev.close()


def _readers() -> int:
    return sum(t.name == "proc-events" for t in threading.enumerate())


def _connector_sockets() -> int:
    """This process's open process-events (NETLINK_CONNECTOR) sockets."""
    with open("/proc/net/netlink") as fh:
        inodes = {row.split()[-1] for row in fh.read().splitlines()[1:] if row.split()[1] == "11"}
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # closed meanwhile (the listdir's own descriptor)
    return sum(link.startswith("socket:[") and link[8:-1] in inodes for link in links)


def test_closed_listeners_leave_nothing_behind_and_take_no_later_listeners_events():
    """close() from another thread once released the socket's descriptor while its reader was
    about to read it again: the number went to the next listener's socket and the old reader
    took that listener's events (a reloaded probe lost its first exits). Twenty listeners opened
    and closed leave no reader and no socket, and the next one gets every exit. (Listeners of
    earlier tests in this worker may still be open, or end meanwhile: the counts may only fall.)"""
    readers, sockets = _readers(), _connector_sockets()
    for i in range(20):
        old = ProcExits.start(pids=None if i % 2 else [])
        if old.unavailable is not None:
            pytest.skip(f"process events unavailable here: {old.unavailable}")
        subprocess.run(["true"], check=True)  # the old reader wakes and reads as it is closed
        old.close()
        old.close()  # twice is harmless
    ProcExits.start(listen=False).close()  # a listener that never read closes its socket itself
    assert wait_for(lambda: _readers() <= readers, 10, what="every closed listener's reader to end")
    assert wait_for(lambda: _connector_sockets() <= sockets, 10, what="every closed listener's socket to close")
    events = ProcExits.start()
    try:
        procs = [subprocess.Popen(["true"]) for _ in range(20)]
        for p in procs:
            p.wait()
        assert wait_for(lambda: all(events.get(p.pid) is not None for p in procs), 10, what="every exit")
        assert events.datagrams == events.received
    finally:
        events.close()

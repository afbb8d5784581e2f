"""A signal handled at any point of the main loop's wait never deadlocks it.

Python runs a handler between two bytecodes of the main thread, wherever that thread is. The
daemon's handlers once `put` into a `queue.Queue` that the main loop was waiting on: a SIGHUP that
came while the loop held the queue's own lock (entering its wait, or back from a timed-out one)
left the daemon silent for good, through its SIGTERM (seen once in `make test`, on a loaded
machine). Chance made that rare; here the handler is run deliberately at every point a trace
function sees inside each kind of wait the daemon and the relay make (timed out, answered,
non-blocking, blocking until another thread puts), in a child process with a time limit: a
deadlock is a child that never ends. The same harness around a `queue.Queue` must hang, or it
could not tell.
"""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO

HARNESS = r"""
import queue, signal, sys, threading
from watchdog.service.signals import deliver_to, inbox

box = inbox() if sys.argv[1] == "inbox" else queue.Queue()
if sys.argv[1] == "inbox":
    deliver_to(box, (signal.SIGHUP,))
else:  # the handler the daemon had
    signal.signal(signal.SIGHUP, lambda signum, _frame: box.put(signum))
handler = signal.getsignal(signal.SIGHUP)
state = {"inside": False, "busy": False, "fired": 0}

def tracer(frame, event, arg):
    # A pending signal is handled at a call, a line or a return: run the real handler there.
    if state["inside"] and not state["busy"] and event in ("call", "line", "return"):
        state["busy"] = True
        try:
            handler(signal.SIGHUP, frame)
            state["fired"] += 1
        finally:
            state["busy"] = False
    return tracer

def wait(how):
    state["inside"] = True
    sys.settrace(tracer)
    try:
        return how()
    except queue.Empty:
        return None
    finally:
        sys.settrace(None)
        state["inside"] = False

import os
got = 0
for _ in range(50):
    got += wait(lambda: box.get(timeout=0.001)) is not None          # the main loop's timed wait
    got += wait(lambda: box.get(block=False)) is not None
    box.put(-1)
    got += wait(lambda: box.get(timeout=5)) is not None               # answered at once
    # a real signal while blocked without a time limit (the relay's wait), from another thread
    sender = threading.Timer(0.002, os.kill, (os.getpid(), signal.SIGHUP))
    sender.start()
    got += box.get(timeout=30) is not None
    sender.join()
    state["fired"] += 1
while True:  # what the handlers put and no wait above took
    try:
        box.get(block=False)
        got += 1
    except queue.Empty:
        break
print(state["fired"], got - 50)
"""


def _run(kind: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HARNESS, kind], capture_output=True, text=True, cwd=str(REPO),
                          timeout=timeout)


def test_a_handler_run_anywhere_in_the_wait_neither_deadlocks_nor_loses_the_signal():
    r = _run("inbox", timeout=60)
    assert r.returncode == 0, r.stderr
    fired, received = (int(x) for x in r.stdout.split())
    # every traced wait ran the handler at least once (before the call and after it returned)
    assert fired >= 50 * 3 * 2 + 50, r.stdout
    assert received == fired, r.stdout


def test_the_harness_catches_the_deadlock_of_the_locked_queue_the_daemon_had():
    try:
        r = _run("locked", timeout=5)
    except subprocess.TimeoutExpired:
        return  # deadlocked, as it should: the harness can tell
    raise AssertionError(f"a queue.Queue survived a handler inside its wait: {r.stdout} {r.stderr}")

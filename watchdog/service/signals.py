"""Signals handed to a waiting thread without a lock the interrupted thread may hold.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread is,
including inside `queue.Queue.get` or `threading.Event.wait` at a moment when it holds their
internal lock (entering the wait, or back from a timed-out one). A handler that then calls
`Queue.put` or `Event.set` asks for that same lock, and the main thread waits on itself for ever:
no reload, no stop, no systemd ping. The suite met it under load: a daemon sent SIGHUP was silent
from then on, through its SIGTERM, until it was killed. `queue.SimpleQueue` is the standard
library's queue with no Python-level lock (its `put` is documented reentrant), so the handlers
installed here do nothing but `put` into one, and the waiting thread `get`s from it.
"""

from __future__ import annotations

import queue
import signal
from typing import Any, Iterable


def inbox() -> "queue.SimpleQueue[int]":
    """Where handlers put the signals they receive (and other threads their own wake-ups)."""
    return queue.SimpleQueue()


def deliver_to(box: "queue.SimpleQueue[int]", signums: Iterable[int]) -> None:
    """Each of `signums`, when it arrives, is put into `box` and nothing else (main thread only)."""
    def enqueue(signum: int, _frame: Any) -> None:
        box.put(signum)

    for signum in signums:
        signal.signal(signum, enqueue)

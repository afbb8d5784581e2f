"""Probe rounds take turns at the interpreter: one round's Python work at a time.

Why: the probes that share an interval start together (one scheduler wake-up starts them all),
and each does many small reads (/proc, heartbeat files, log stats). Every read lets go of the
GIL and has to take it back from whichever thread took it meanwhile, so rounds that run at the
same time hand the GIL back and forth at every read: measured on a 2-core VM, five threads doing
the same small reads at once took 3.3x the CPU of the same work done one after the other (60,000
context switches against 300). A turn costs one hand-over per round instead.

A round gives its turn away while it waits for another process (`waiting()`, around a command's
output: npu-smi may take seconds) and takes it back after. A turn is waited for at most
`MAX_WAIT` seconds: a round stuck while holding it (a read hung on a dead NFS mount) delays the
others by that much, then they run without it, as they did before turns existed.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

#: The longest a round waits for its turn before it runs anyway.
MAX_WAIT = 1.0

_TURN = threading.Lock()


class _Held(threading.local):
    """Whether this thread holds the turn (each thread sees its own)."""

    on = False


_HELD = _Held()


def _take() -> None:
    _HELD.on = _TURN.acquire(timeout=MAX_WAIT)


def _give() -> None:
    if holding():
        _HELD.on = False
        _TURN.release()


def holding() -> bool:
    """Whether this thread holds the turn now."""
    return _HELD.on


@contextmanager
def turn() -> Iterator[None]:
    """Run the body in this thread's turn (or without one after MAX_WAIT)."""
    if holding():  # nested: the outer turn covers it
        yield
        return
    _take()
    try:
        yield
    finally:
        _give()


@contextmanager
def waiting() -> Iterator[None]:
    """The body waits for something outside the interpreter: the turn goes to another round
    meanwhile, and is taken back after (a thread without a turn just runs the body)."""
    if not holding():
        yield
        return
    _give()
    try:
        yield
    finally:
        _take()

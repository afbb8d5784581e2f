"""Probe rounds take turns at the interpreter: one round's Python work at a time.

Why: the probes that share an interval start together (one scheduler wake-up starts them all),
and each does many small reads (/proc, heartbeat files, log stats). Every read lets go of the
GIL and has to take it back from whichever thread took it meanwhile, so rounds that run at the
same time hand the GIL back and forth at every read: measured on a 2-core VM, five threads doing
the same small reads at once took 3.3x the CPU of the same work done one after the other (60,000
context switches against 300). A turn costs one hand-over per round instead.

A round gives its turn away while it waits for another process (`waiting()`, around a command's
output: npu-smi may take seconds) and takes it back after. A round's Python work takes a few
milliseconds; a turn held longer than `MAX_WAIT` (a logs round catching up a backlog, a read hung
on a dead NFS mount) is no longer waited for: the others run without it, as they did before turns
existed, so a stuck round delays each other round by at most `MAX_WAIT`, once, and a round's own
timeout (a second or more) is never spent waiting for a turn.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

#: How long a turn is waited for, counted from when its holder took it: past that the holder is
#: busy for long or stuck, and a round runs without a turn.
MAX_WAIT = 0.25

_TURN = threading.Lock()
#: When the turn was last taken (monotonic); read without the lock, a stale value only shortens
#: or lengthens one wait.
_taken_at = 0.0


class _Held(threading.local):
    """Whether this thread holds the turn (each thread sees its own)."""

    on = False


_HELD = _Held()


def _take() -> None:
    global _taken_at
    left = MAX_WAIT - (time.monotonic() - _taken_at) if _TURN.locked() else MAX_WAIT
    got = _TURN.acquire(timeout=left) if left > 0 else _TURN.acquire(blocking=False)
    if got:
        _taken_at = time.monotonic()
    _HELD.on = got


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


def pause(seconds: float) -> None:
    """Sleep with the turn given away (a probe that looks again shortly after)."""
    with waiting():
        time.sleep(seconds)


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

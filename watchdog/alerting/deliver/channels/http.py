"""One delivery attempt over HTTP with a total deadline and a bounded answer.

Why not just requests' `timeout=(connect, read)`: the read timeout applies to each socket read,
so a receiver that drips one byte a second never trips it (one send took 211 s while three
notifications waited behind it), and an endless answer body would be read into memory. Here:

- `Deadline` arms a timer for the attempt's total time; every socket the attempt's connection
  uses (the new TCP socket, the TLS socket over it, a kept-alive one) is registered with the
  deadline of the thread sending, and when it expires the socket is shut down, which ends any
  blocked connect, send or read at once. The sender then reports "no complete answer within the
  deadline", like any other failed attempt (retried with backoff).
- `read_answer` reads at most `MAX_ANSWER_BYTES` of the body (vendors answer a few hundred
  bytes) and never asks for compressed answers, so a bomb cannot expand in memory.

The hooks are urllib3's connection classes selected through requests' adapter (in
watchdog.alerting.deliver.httpclient, imported on the first send).
"""

from __future__ import annotations

import socket
import threading
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

if TYPE_CHECKING:
    import requests

#: The largest answer body read; the rest is not read (the connection is closed).
MAX_ANSWER_BYTES = 64 * 1024
_local = threading.local()


class Deadline:
    """The total time of one attempt, for the current thread: `with Deadline(15.0) as d: ...`."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self._socks: List[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "Deadline":
        _local.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()
        _local.deadline = None
        with self._lock:
            self._socks = []

    def watch(self, sock: Optional[socket.socket]) -> None:
        if sock is None:
            return
        with self._lock:
            if not any(s is sock for s in self._socks):
                self._socks.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            socks = list(self._socks)
        for s in socks:
            _shut(s)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed, or detached by a TLS wrap (the TLS socket is watched too)
        pass


def watch_socket(sock: Optional[socket.socket]) -> None:
    d: Optional[Deadline] = getattr(_local, "deadline", None)
    if d is not None:
        d.watch(sock)


def make_session() -> "requests.Session":
    """A requests session whose connections obey `Deadline`. requests and urllib3 are imported
    here, on the first send: a daemon whose channels have sent nothing does not carry them
    (about 5 MB of its memory)."""
    from watchdog.alerting.deliver.httpclient import deadline_session  # lazy: requests loads on the first send

    return deadline_session(watch_socket)


def read_answer(resp: "requests.Response", limit: int = MAX_ANSWER_BYTES) -> Tuple[str, bool]:
    """(text of at most `limit` bytes, whether the body was longer) of a streamed response."""
    buf = bytearray()
    cut = False
    for chunk in resp.iter_content(chunk_size=16384):
        buf += chunk
        if len(buf) > limit:
            del buf[limit:]
            cut = True
            break
    try:
        text = bytes(buf).decode(resp.encoding or "utf-8", "replace")
    except LookupError:  # a made-up charset name
        text = bytes(buf).decode("utf-8", "replace")
    return text, cut

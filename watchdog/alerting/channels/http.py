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

The hooks are urllib3's connection classes selected through requests' adapter (public
attributes: `pool_classes_by_scheme`, `ConnectionCls`); proxies from the environment keep
working as before (SOCKS proxies are left alone and get the per-read timeouts only).
"""

from __future__ import annotations

import socket
import threading
from typing import Any, List, Optional, Tuple

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

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


def _watch(sock: Optional[socket.socket]) -> None:
    d: Optional[Deadline] = getattr(_local, "deadline", None)
    if d is not None:
        d.watch(sock)


class _Watched:
    """Mixin for urllib3 connections: register each socket with the sending thread's deadline."""

    sock: Optional[socket.socket]

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()  # type: ignore[misc]
        _watch(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> Any:
        _watch(self.sock)  # a kept-alive connection, or the TLS socket made by connect()
        return super().request(*args, **kwargs)  # type: ignore[misc]


class _Conn(_Watched, HTTPConnection):
    pass


class _TLSConn(_Watched, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Conn


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConn


_POOLS = {"http": _Pool, "https": _TLSPool}


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = dict(_POOLS)
        return manager


def make_session() -> requests.Session:
    """A requests session whose connections obey `Deadline`."""
    s = requests.Session()
    adapter = _Adapter()
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s


def read_answer(resp: requests.Response, limit: int = MAX_ANSWER_BYTES) -> Tuple[str, bool]:
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

"""The requests session of a delivery attempt: urllib3 connections that register their sockets
with the sending thread's `Deadline` (watchdog.alerting.deliver.channels.http, which passes its `watch`
hook in: this module sits below the channels and imports none of them).

The hooks are urllib3's connection classes selected through requests' adapter (public
attributes: `pool_classes_by_scheme`, `ConnectionCls`); proxies from the environment keep
working as before (SOCKS proxies are left alone and get the per-read timeouts only). A module of
its own so that requests is imported only when something is sent.
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Optional

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

Watch = Callable[[Optional[socket.socket]], None]


def _unwatched(_sock: Optional[socket.socket]) -> None:
    return None


#: The hook each new or reused socket is handed to (set by `deadline_session`).
_watch: Watch = _unwatched


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


def deadline_session(watch: Watch) -> requests.Session:
    """A requests session whose connections hand each socket to `watch` (the channels' hook
    that registers it with the sending thread's `Deadline`)."""
    global _watch
    _watch = watch
    s = requests.Session()
    adapter = _Adapter()
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s



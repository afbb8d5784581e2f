"""The HTTP endpoint: `/metrics`, `/healthz`, `/api/status`, the runbook (`/runbook/<lang>`) and a
small status page at `/`.

Everything served reads cached state; no request ever runs a probe or a subprocess, so a hung
npu-smi cannot slow a scrape.

No client can exhaust the daemon (see `watchdog.service.fdbudget`): each connection has a read timeout
(`http.connection_timeout`), at most `http.max_connections` are open at once (fewer if the
descriptor limit leaves less after the probes' reserve), and at the cap a new connection evicts
the oldest one that has not sent a complete request yet (an idle or trickling client) instead of
being refused, so a scrape or a health check still gets through while idle sockets pile up. Only
when every slot serves a real request is the new connection closed at once.
"""

from __future__ import annotations

import collections
import errno
import functools
import ipaddress
import json
import logging
import os
import selectors
import socket
import socketserver
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from watchdog.compat import Protocol  # 3.7: from typing_extensions

from watchdog import __version__, runbook
from watchdog.core.findings import JOB_LABEL
from watchdog.discovery.status import summary_lines
from watchdog.http import wire
from watchdog.metrics.collector import CONTENT_TYPE

log = logging.getLogger("watchdog.httpserver")  # its name in the journal, kept across the move into a folder

Route = Callable[[], Tuple[int, str, bytes]]


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops connections when a few scrapers arrive at once
    # (measured: 1-2 s client retries with 10 concurrent scrapers).
    request_queue_size = 128
    #: Set before serving: the connection cap (see the module docstring).
    max_connections = 64

    def server_activate(self) -> None:
        super().server_activate()
        self._conn_lock = threading.Lock()
        self.open_connections = 0
        #: Accepted connections whose request has not been read completely, oldest first.
        self._waiting: "collections.OrderedDict[int, socket.socket]" = collections.OrderedDict()
        self.dropped = {"evicted": 0, "refused": 0}

    def get_request(self) -> Tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                time.sleep(0.05)  # out of descriptors: do not spin on the still-readable listener
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conn_lock:
            if self.open_connections >= self.max_connections:
                if not self._waiting:
                    self.dropped["refused"] += 1
                    self.shutdown_request(request)
                    return
                _, victim = self._waiting.popitem(last=False)
                self.dropped["evicted"] += 1
                try:
                    victim.shutdown(socket.SHUT_RDWR)  # its thread reads EOF and ends
                except OSError:
                    pass
            self.open_connections += 1
            self._waiting[id(request)] = request
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """socketserver prints a traceback to stderr for every handler error: a client that sends a
        request and leaves before the answer (a scraper's timeout, a port scan, curl ^C) would put
        one in the journal per connection. A connection the client broke is a debug line; anything
        else is logged once per error with its traceback, through the daemon's (redacting) log."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, socket.timeout)):
            log.debug("http client %s went away: %s", client_address[0] if client_address else "?", exc)
            return
        log.exception("http: a connection from %s failed", client_address[0] if client_address else "?")

    def request_read(self, request: Any) -> None:
        """The handler has the whole request: this connection is no longer evictable."""
        with self._conn_lock:
            self._waiting.pop(id(request), None)

    def _forget(self, request: Any) -> None:
        with self._conn_lock:
            self._waiting.pop(id(request), None)
            self.open_connections = max(0, self.open_connections - 1)


def is_local_client(peer: str, local: str) -> bool:
    """Whether a client at `peer`, connected to our address `local`, runs on this node."""
    try:
        addr = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    if mapped is not None:
        addr = mapped
    return addr.is_loopback or str(addr) == local.split("%", 1)[0].replace("::ffff:", "")


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsSource(Protocol):
    """What `/metrics` is rendered from (watchdog.metrics.collector.make_registry)."""

    def render(self) -> bytes: ...


class HttpEndpoint:
    def __init__(self, host: str, port: int, registry: MetricsSource, status_fn: Callable[[], Dict[str, Any]],
                 healthy_fn: Callable[[], Tuple[bool, str]], max_connections: int = 64,
                 connection_timeout: float = 10.0, status_remote: Callable[[], bool] = lambda: False):
        self.registry = registry
        self._render_cond = threading.Condition()
        self._rendering = False
        self._generation = 0
        self._shared: Optional[bytes] = None
        self.status_fn = status_fn
        self.healthy_fn = healthy_fn
        self.routes: Dict[str, Route] = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/api/status": self._status,
            "/": self._index,
        }
        # The runbook every message links to (watchdog.runbook): one page per shipped language.
        for lang in runbook.languages():
            self.routes[f"/runbook/{lang}"] = functools.partial(self._runbook, lang)
        if runbook.DEFAULT_LANGUAGE in runbook.languages():
            self.routes["/runbook"] = functools.partial(self._runbook, runbook.DEFAULT_LANGUAGE)
        #: Routes that show what the daemon knows of the node's jobs (paths, command lines, alert
        #: texts): served to clients on this node only unless `http.status_remote` (see
        #: docs/guarantees.md); others get `public_routes`' answer, or 403.
        self.local_only = {"/api/status", "/"}
        self.public_routes: Dict[str, Route] = {"/": self._public_index}
        self.status_remote = status_remote
        endpoint = self

        server = f"npu-watchdog/{__version__}"

        class Handler(socketserver.StreamRequestHandler):
            # Per read on the connection (StreamRequestHandler sets it on the socket): an idle
            # or trickling client is dropped, and at the cap evicted sooner.
            timeout = connection_timeout

            def handle(self) -> None:
                try:
                    request = wire.read_request(self.rfile)
                except wire.BadRequest as exc:
                    self.server.request_read(self.request)  # type: ignore[attr-defined]
                    self._send(exc.method, exc.code, "text/plain; charset=utf-8", exc.text.encode() + b"\n")
                    return
                if request is None:  # connected and closed without a request (a port check)
                    return
                self.server.request_read(self.request)  # type: ignore[attr-defined]
                if request.method not in ("GET", "HEAD"):
                    self._send(request.method, 501, "text/plain; charset=utf-8", b"only GET and HEAD\n")
                    return
                code, ctype, body = endpoint.answer(request.path, self._local)
                self._send(request.method, code, ctype, body, request.path)

            def _local(self) -> bool:
                """The client is on this node: a loopback address, or the address it reached us
                on (a connection from the node to its own interface comes from that address)."""
                return is_local_client(self.client_address[0], self.connection.getsockname()[0])

            def _send(self, method: str, code: int, ctype: str, body: bytes, path: str = "") -> None:
                self.wfile.write(wire.answer(code, ctype, body, server, head=method == "HEAD"))
                log.debug("http %s %r %r %d", self.client_address[0], method[:20], path[:200], code)

        server_cls = _Server6 if ":" in host else _Server
        self.server = server_cls((host, port), Handler)
        self.server.max_connections = max_connections
        self.port = self.server.server_address[1]
        self.thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self.thread = threading.Thread(target=self._serve, name="http", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        """Accept connections until `stop`. Not socketserver's serve_forever: that wakes every
        0.5 s to look for a shutdown request, which was several percent of the idle daemon's CPU;
        here a pipe written by `stop` wakes the loop, and nothing else but a connection does."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.server, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping:
                for key, _ in sel.select():
                    if key.fileobj is self.server and not self._stopping:
                        self.server._handle_request_noblock()  # type: ignore[attr-defined]  # select() said readable: no second wait

    def stop(self) -> None:
        """Idempotent: a second call must not write to (or close) descriptors the first one
        closed, which by then may belong to any file of the daemon."""
        if self.thread is not None and not self._stopping:
            self._stopping = True
            os.write(self._wake_w, b"x")
            self.thread.join(10.0)
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
        self.server.server_close()

    def answer(self, path: str, is_local: Callable[[], bool]) -> Tuple[int, str, bytes]:
        """The route's answer to GET `path` (`is_local` says whether the client is on this node:
        asked only for the routes that care)."""
        route = self.routes.get(path)
        if path in self.local_only and not self.status_remote() and not is_local():
            route = self.public_routes.get(path, self._forbidden)
        if route is None:
            return 404, "text/plain; charset=utf-8", b"not found\n"
        try:
            return route()
        except Exception:
            log.exception("HTTP %s failed", path)
            return 500, "text/plain; charset=utf-8", b"internal error\n"

    def connection_stats(self) -> Dict[str, Any]:
        """Open connections, the cap in force and the connections dropped at the cap."""
        srv = self.server
        return {"open": srv.open_connections, "limit": srv.max_connections, "dropped": dict(srv.dropped)}

    # -- routes ----------------------------------------------------------------------------
    def _metrics(self) -> Tuple[int, str, bytes]:
        # Rendering costs ~2 ms of CPU. Scrapes that arrive while one rendering is under way wait
        # for it and share its result (single flight) instead of queueing up renderings of their
        # own: what they get is at most one rendering's time old, never an older cached copy.
        with self._render_cond:
            if self._rendering:
                generation = self._generation
                while self._rendering and self._generation == generation:
                    self._render_cond.wait()
                if self._shared is not None and self._generation != generation:
                    return 200, CONTENT_TYPE, self._shared
            self._rendering = True
        body: Optional[bytes] = None
        try:
            body = self.registry.render()
        finally:
            with self._render_cond:
                self._shared = body
                self._generation += 1
                self._rendering = False
                self._render_cond.notify_all()
        return 200, CONTENT_TYPE, body

    def _healthz(self) -> Tuple[int, str, bytes]:
        ok, why = self.healthy_fn()
        return (200 if ok else 503), "text/plain; charset=utf-8", (why + "\n").encode("utf-8")

    def _status(self) -> Tuple[int, str, bytes]:
        body = json.dumps(self.status_fn(), indent=2, default=str, ensure_ascii=False)
        return 200, "application/json", body.encode("utf-8")

    def _runbook(self, lang: str) -> Tuple[int, str, bytes]:
        return 200, "text/html; charset=utf-8", runbook.page(lang)

    @staticmethod
    def _forbidden() -> Tuple[int, str, bytes]:
        return (403, "text/plain; charset=utf-8",
                b"served to clients on this node only (http.status_remote: false); /metrics and /healthz are open\n")

    @staticmethod
    def _public_index() -> Tuple[int, str, bytes]:
        page = ("<!doctype html><html><head><meta charset='utf-8'><title>npu-watchdog</title></head><body>"
                f"<h1>npu-watchdog {runbook.escape_html(__version__)}</h1>"
                "<p><a href='/metrics'>/metrics</a> &middot; <a href='/healthz'>/healthz</a> &middot; <a href='/runbook'>/runbook</a></p>"
                "<p>Status and jobs are shown to clients on this node only (<code>npu-watchdog status</code>).</p>"
                "</body></html>")
        return 200, "text/html; charset=utf-8", page.encode("utf-8")

    def _index(self) -> Tuple[int, str, bytes]:
        st = self.status_fn()
        rows = "".join(
            f"<tr><td>{runbook.escape_html(p['name'])}</td><td>{'up' if p['up'] else 'DOWN'}</td>"
            f"<td>{runbook.escape_html(str(p.get('last_result') or p.get('last_error') or ''))}</td></tr>"
            for p in st.get("probes", [])
        )
        findings = "".join(
            f"<li>[{runbook.escape_html(f['severity'])}] {runbook.escape_html(f['summary'])}</li>" for f in st.get("findings", [])
        ) or "<li>none</li>"
        jobs = "".join(f"<li>{runbook.escape_html(line)}</li>" for line in summary_lines(st.get("discovery")))
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>npu-watchdog</title></head><body>"
            f"<h1>npu-watchdog {runbook.escape_html(__version__)}</h1>"
            f"<p>host {runbook.escape_html(st['host'])}, job {runbook.escape_html(st[JOB_LABEL])}</p>"
            "<p><a href='/metrics'>/metrics</a> &middot; <a href='/healthz'>/healthz</a> &middot; "
            "<a href='/api/status'>/api/status</a> &middot; <a href='/runbook'>runbook</a></p>"
            f"<h2>Discovered training jobs</h2><ul>{jobs}</ul>"
            f"<h2>Probes</h2><table border='1'><tr><th>probe</th><th>state</th><th>last</th></tr>{rows}</table>"
            f"<h2>Findings in force</h2><ul>{findings}</ul></body></html>"
        )
        return 200, "text/html; charset=utf-8", page.encode("utf-8")

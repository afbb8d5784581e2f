"""Idle connections cannot exhaust the daemon: ~1,100 of them against a daemon whose open-files
limit is systemd's default 1024 (soft and hard, so it cannot raise it), while /healthz answers
and a failure line in a log still pages. Loopback only; the sockets are closed at the end."""

from __future__ import annotations

import resource
import socket
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import http_get, wait_for

IDLE = 1100
LIMIT = 1024


def _room_for_idle_sockets() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE + 300
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"the test process needs {need} open files (hard limit {hard})")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def test_a_thousand_idle_connections_leave_health_and_alerting_working(make_daemon, tmp_path: Path) -> None:
    _room_for_idle_sockets()
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_bytes(b"")
    with Receiver("webhook") as pager:
        d = make_daemon({
            "probes": {"logs": {"enabled": True, "interval": "1s", "hold": "1h",
                                "sources": [{"name": "train", "paths": [str(logdir / "*.log")]}]}},
            "alerting": {"group_window": "300ms", "channels": [{"type": "webhook", "name": "pager", "url": pager.url}]},
        }, wrapper=("/bin/sh", "-c", f'ulimit -n {LIMIT} && exec "$@"', "sh"))
        wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
        idle = []
        try:
            for _ in range(IDLE):
                idle.append(socket.create_connection(("127.0.0.1", d.port), timeout=10))
            # every one of them still open on this side, none has sent a byte
            assert http_get(d.url + "/healthz", timeout=10)[0] == 200
            with open(log, "ab") as fh:
                fh.write(b"{'loss': nan, 'grad_norm': nan}\n")
            pager.wait_for(1)
            assert http_get(d.url + "/healthz", timeout=10)[0] == 200
            m = d.metrics()
            assert m["npu_watchdog_http_connections_limit"] == 64
            assert m['npu_watchdog_http_connections_dropped_total{reason="evicted"}'] >= IDLE - 64
            assert m["npu_watchdog_http_connections"] <= 64 + 2
            assert d.alive()
        finally:
            for s in idle:
                s.close()
        assert "Too many open files" not in d.log()
        assert [r.json["alerts"][0]["labels"]["alertname"] for r in pager.accepted()] == ["log_nan"]


def test_an_idle_connection_is_closed_after_the_connection_timeout(make_daemon) -> None:
    d = make_daemon({}, start=False)
    d.config["http"]["connection_timeout"] = "1s"
    d.write_config(d.config)
    d.start()
    with socket.create_connection(("127.0.0.1", d.port), timeout=30) as s:
        assert s.recv(1) == b""  # the daemon hung up (not the 30 s client timeout: that would raise)


def test_clients_that_leave_before_the_answer_put_no_traceback_in_the_log(make_daemon, tmp_path: Path) -> None:
    """A scraper that times out, a port scan, curl ^C: each sent its request and reset the
    connection before the answer, and socketserver printed a full traceback per connection (200
    clients, 200 tracebacks in the journal). Now a debug line each; the endpoint keeps serving."""
    import struct
    import time

    d = make_daemon({"probes": {"commands": [{"name": "ok", "argv": ["/bin/true"], "interval": "1s"}]}})
    port = int(d.url.rsplit(":", 1)[1])
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        s.close()
    time.sleep(2)
    assert http_get(d.url + "/healthz")[0] == 200
    assert "Traceback" not in d.log(), d.log()[-3000:]

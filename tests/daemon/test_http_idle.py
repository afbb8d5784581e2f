"""The HTTP endpoint sleeps while nobody connects: its accept loop wakes for a connection or for
`stop`, never on a timer (socketserver's serve_forever polls every 0.5 s), and stops at once."""

from __future__ import annotations

import os
import selectors
import threading
import time
import urllib.request

from tests.helpers import wait_for
from watchdog.http import server as httpserver


class _Registry:
    def render(self) -> bytes:
        return b"up 1\n"


def test_the_accept_loop_wakes_only_for_connections_and_stop(monkeypatch):
    selects = []

    class Counting(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
        def select(self, timeout=None):
            selects.append(timeout)
            return super().select(timeout)

    monkeypatch.setattr(httpserver.selectors, "DefaultSelector", Counting)
    ep = httpserver.HttpEndpoint("127.0.0.1", 0, _Registry(), lambda: {}, lambda: (True, "ok"))
    ep.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # idle: the loop is blocked in one select
            time.sleep(0.1)
        assert selects == [None], selects
        with urllib.request.urlopen(f"http://127.0.0.1:{ep.port}/metrics", timeout=10) as resp:
            assert resp.read() == b"up 1\n"
        wait_for(lambda: len(selects) >= 2, what="the loop back in select")  # (it serves in a thread)
        assert all(t is None for t in selects), selects
    finally:
        done = threading.Event()
        threading.Thread(target=lambda: (ep.stop(), done.set()), daemon=True).start()
        assert done.wait(5.0), "stop returns at once"
    assert ep.thread is not None and not ep.thread.is_alive()


def test_a_second_stop_writes_to_no_descriptor_the_first_one_freed(tmp_path):
    """`stop` closes the loop's wake pipe; a second `stop` (the daemon's shutdown path may run
    twice) must not write its wake byte to whatever file now holds that descriptor number."""
    ep = httpserver.HttpEndpoint("127.0.0.1", 0, _Registry(), lambda: {}, lambda: (True, "ok"))
    ep.start()
    ep.stop()
    files = [tmp_path / f"f{i}" for i in range(4)]
    fds = [os.open(str(p), os.O_WRONLY | os.O_CREAT, 0o600) for p in files]  # take the freed numbers
    try:
        ep.stop()
    finally:
        for fd in fds:
            os.close(fd)
    assert [p.read_bytes() for p in files] == [b""] * 4

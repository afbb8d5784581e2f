"""What the HTTP endpoint shows to whom: /metrics and /healthz to every client (Prometheus scrapes
the opened port), /api/status and the detailed landing page to clients on this node only unless
`http.status_remote` (docs/guarantees.md)."""

from __future__ import annotations

import pytest

from tests.helpers import http_get
from watchdog.http import server as httpserver
from watchdog.http.server import HttpEndpoint, is_local_client


def test_which_clients_are_on_this_node():
    assert is_local_client("127.0.0.1", "0.0.0.0") and is_local_client("127.0.0.9", "127.0.0.1")
    assert is_local_client("::1", "::") and is_local_client("::ffff:127.0.0.1", "::ffff:127.0.0.1")
    assert is_local_client("10.0.0.5", "10.0.0.5")  # the node reaching its own interface
    assert not is_local_client("10.0.0.6", "10.0.0.5") and not is_local_client("::ffff:10.0.0.6", "::ffff:10.0.0.5")
    assert not is_local_client("not an address", "10.0.0.5")


class _Registry:
    def render(self) -> bytes:
        return b"npu_watchdog_up 1\n"


STATUS = {"host": "node-x", "training_job": "secret-job-name", "probes": [], "findings": [],
          "discovery": {"enabled": True, "jobs": [{"name": "secret-job-name", "ranks": [], "launcher": None}]}}


@pytest.mark.parametrize("remote_allowed", [False, True])
def test_a_client_on_another_host_gets_metrics_but_not_the_status(monkeypatch, remote_allowed):
    # Every client of this test machine is local; the other host's view is the one answer that
    # cannot be produced here, so the network position alone is replaced.
    monkeypatch.setattr(httpserver, "is_local_client", lambda peer, local: False)
    ep = HttpEndpoint("127.0.0.1", 0, _Registry(), lambda: STATUS, lambda: (True, "ok"),
                      status_remote=lambda: remote_allowed)
    ep.start()
    try:
        url = f"http://127.0.0.1:{ep.port}"
        assert http_get(url + "/metrics") == (200, "npu_watchdog_up 1\n")
        assert http_get(url + "/healthz")[0] == 200
        code, body = http_get(url + "/api/status")
        page = http_get(url + "/")[1]
        if remote_allowed:
            assert code == 200 and "secret-job-name" in body and "secret-job-name" in page
        else:
            assert code == 403 and "this node only" in body
            assert "secret-job-name" not in page and "/metrics" in page
    finally:
        ep.stop()


def test_a_client_on_this_node_gets_the_status():
    ep = HttpEndpoint("127.0.0.1", 0, _Registry(), lambda: STATUS, lambda: (True, "ok"))
    ep.start()
    try:
        code, body = http_get(f"http://127.0.0.1:{ep.port}/api/status")
        assert code == 200 and "secret-job-name" in body
    finally:
        ep.stop()

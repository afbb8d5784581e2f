"""The endpoint's own HTTP (watchdog.http.wire) against a real listening endpoint on 127.0.0.1:
what `http.server` answered before (codes, limits, HEAD without a body, one request per
connection); and `compat.hidden_module` in a fresh interpreter."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from watchdog.http import server as httpserver, wire


class _Registry:
    def render(self) -> bytes:
        return b"up 1\n"


@pytest.fixture
def endpoint():
    ep = httpserver.HttpEndpoint("127.0.0.1", 0, _Registry(), lambda: {}, lambda: (True, "ok"),
                                 connection_timeout=5.0)
    ep.start()
    yield ep
    ep.stop()


def exchange(port: int, raw: bytes) -> bytes:
    """Send `raw`, read until the server closes: the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                return b"".join(chunks)
            chunks.append(data)


def split(answer: bytes):
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return lines[0], headers, body


def test_get_answers_the_route_and_closes(endpoint):
    status, headers, body = split(exchange(endpoint.port, b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"))
    assert status == "HTTP/1.0 200 OK"
    assert body == b"up 1\n" and headers["Content-Length"] == "5"
    assert headers["Server"].startswith("npu-watchdog/") and headers["Connection"] == "close"
    assert headers["Content-Type"].startswith("text/plain")


def test_head_has_the_headers_and_no_body(endpoint):
    status, headers, body = split(exchange(endpoint.port, b"HEAD /metrics HTTP/1.0\r\n\r\n"))
    assert status == "HTTP/1.0 200 OK" and headers["Content-Length"] == "5" and body == b""


# Each request is exactly what the server reads before it answers: bytes left unread when it
# closes would make the kernel reset the connection, and the client could lose the answer.
@pytest.mark.parametrize("raw,code", [
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "501"),
    (b"hello\r\n", "400"),
    (b"GET /\r\n", "400"),  # HTTP/0.9: no version
    (b"GET /metrics FTP/1.0\r\n", "400"),
    (b"GET /" + b"a" * (wire.MAX_LINE - 4), "414"),  # 65,537 bytes and no end of line
    (b"GET / HTTP/1.1\r\nX: " + b"b" * (wire.MAX_LINE - 2), "431"),
    (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101, "431"),
    (b"GET /nothing-here HTTP/1.1\r\n\r\n", "404"),
    (b"GET /metrics HTTP/2.0\r\n", "505"),
    (b"GET /metrics HTTP/x.y\r\n", "400"),
    (b"GET /metrics HTTP/1.1.1\r\n", "400"),
])
def test_what_no_route_answers_gets_its_code(endpoint, raw, code):
    status, headers, body = split(exchange(endpoint.port, raw))
    assert status.split()[1] == code, (status, body)
    assert int(headers["Content-Length"]) == len(body) > 0


def test_a_connection_closed_without_a_request_gets_nothing(endpoint):
    assert exchange(endpoint.port, b"") == b""
    status, _, _ = split(exchange(endpoint.port, b"GET /healthz HTTP/1.1\r\n\r\n"))  # still serving
    assert status == "HTTP/1.0 200 OK"


def test_a_hidden_module_is_absent_inside_and_importable_after():
    code = ("import sys\nfrom watchdog.compat import hidden_module\n"
            "with hidden_module('ssl'):\n"
            "    try:\n        import ssl\n        print('imported')\n"
            "    except ImportError:\n        print('hidden')\n"
            "import ssl\nprint('after', hasattr(ssl, 'SSLContext'))\n"
            "with hidden_module('ssl'):\n    import ssl as again\nprint('kept', again is ssl)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split("\n")[:3] == ["hidden", "after True", "kept True"], out


@pytest.mark.parametrize("raw", [
    b"GET //metrics HTTP/1.1\r\n\r\n",  # a base URL ending in "/" joined with "/metrics"
    b"GET ///metrics?x HTTP/1.0\r\n\r\n",
    b"\r\nGET /metrics HTTP/1.1\r\n\r\n",  # an empty line before the request (RFC 9112 2.2)
    b"\n\r\nGET /metrics HTTP/1.1\n\n",
])
def test_what_http_server_answered_is_answered(endpoint, raw):
    status, _, body = split(exchange(endpoint.port, raw))
    assert status == "HTTP/1.0 200 OK" and body == b"up 1\n", (status, body)


def test_a_head_gets_no_body_with_its_error_either(endpoint):
    status, headers, body = split(exchange(endpoint.port, b"HEAD / HTTP/1.1\r\n" + b"X: y\r\n" * 101))
    assert status.split()[1] == "431" and int(headers["Content-Length"]) > 0 and body == b""


@pytest.mark.parametrize("raw", [b"\r\n", b"   \r\n", b"\r\n" * 9])
def test_only_empty_lines_get_nothing(endpoint, raw):
    assert exchange(endpoint.port, raw) == b""

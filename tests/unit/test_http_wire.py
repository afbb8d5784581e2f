"""The endpoint's own HTTP (watchdog.http.wire), in process: a request read within limits, the
date header, and the lean helpers that replaced standard modules give the same bytes as those
modules. (Against a listening endpoint: tests/daemon/test_http_wire_endpoint.py.)"""

from __future__ import annotations

import email.utils
import hashlib
import html
import io

import pytest

from watchdog import compat, runbook
from watchdog.http import wire


def test_a_hundred_headers_are_read():
    raw = b"GET /a?b HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n"
    assert wire.read_request(io.BytesIO(raw)) == wire.Request("GET", "/a")
    assert wire.read_request(io.BytesIO(b"GET /a HTTP/1.1\n")) == wire.Request("GET", "/a")  # EOF ends the headers
    assert wire.read_request(io.BytesIO(b"")) is None


@pytest.mark.parametrize("when", [0.0, 951782400.5, 1796601599.0, 4102444800.0])
def test_the_date_header_is_the_standard_librarys(when):
    assert wire.http_date(when) == email.utils.formatdate(when, usegmt=True)


@pytest.mark.parametrize("text", ["", "plain", "a&b<c>\"d'e", "&amp;", "<<>>", "日本語 & 中文"])
def test_escape_html_is_html_escape(text):
    assert runbook.escape_html(text) == html.escape(text)
    assert runbook.escape_html(text, quote=False) == html.escape(text, quote=False)


@pytest.mark.parametrize("data", [b"", b"abc", bytes(range(256)) * 40])
def test_the_lean_digests_are_hashlibs(data):
    assert compat.sha256_hex(data) == hashlib.sha256(data).hexdigest()
    assert compat.sha1_hex(data) == hashlib.sha1(data).hexdigest()


@pytest.mark.parametrize("target,path", [("/metrics", "/metrics"), ("//metrics", "/metrics"),
                                         ("///a//b?c=//d", "/a//b"), ("/a?b", "/a"), ("*", "*")])
def test_the_path_is_the_targets_without_query_and_leading_slashes(target, path):
    assert wire.read_request(io.BytesIO(f"GET {target} HTTP/1.1\r\n\r\n".encode())) == wire.Request("GET", path)


def test_errors_name_the_method_when_the_request_line_did():
    with pytest.raises(wire.BadRequest) as got:
        wire.read_request(io.BytesIO(b"HEAD / HTTP/1.1\r\n" + b"X: y\r\n" * 101))
    assert (got.value.code, got.value.method) == (431, "HEAD")
    with pytest.raises(wire.BadRequest) as got:
        wire.read_request(io.BytesIO(b"HEAD / HTTP/9999999.0\r\n\r\n"))
    assert (got.value.code, got.value.method) == (400, "HEAD")

"""The endpoint's HTTP on the wire: one request read within limits, one answer written, the
connection closed (HTTP/1.0, as `http.server`'s handler answers by default).

Not `http.server`: it imports `http.client`, which imports `ssl` (libssl and libcrypto, 4-5 MB
resident, measured by bench/bench_resident.py) and the `email` package to parse headers the
endpoint never reads. The endpoint answers GET and HEAD of a few fixed paths; what it needs of a
request is the method and the path, and that the request ends (its headers read to the blank
line) so a client waiting for its answer gets one. What `http.server` did, kept: a request or
header line up to 64 KiB (414, 431 beyond), at most 100 headers (431), HTTP/1.0 and 1.1 (505 for
a later version spoken as text, 400 for a malformed one), leading slashes of the path collapsed,
a connection closed without a request line answered with nothing. A HEAD gets no body, its
errors included.
"""

from __future__ import annotations

import time
from typing import NamedTuple, Optional

from watchdog.compat import Protocol  # 3.7: from typing_extensions

MAX_LINE = 65536
MAX_HEADERS = 100

REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
           414: "Request-URI Too Long", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
           505: "HTTP Version Not Supported"}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


class Lines(Protocol):
    """What a request is read from (the connection's buffered reader)."""

    def readline(self, __size: int = -1) -> bytes: ...  # noqa: N807 (positional-only, 3.7 style)


class Request(NamedTuple):
    method: str
    path: str  # without the query string


class BadRequest(Exception):
    """A request that gets an error answer instead of a route's (`code`, `text`); `method` when
    the request line named one (a HEAD gets no body with its error either)."""

    def __init__(self, code: int, text: str, method: str = ""):
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text
        self.method = method


#: Empty lines skipped before a request line (RFC 9112 2.2: a client may send one after a body).
LEADING_EMPTY_LINES = 8


def read_request(rfile: Lines) -> Optional[Request]:
    """The request on `rfile`, its headers read and dropped; None when the client closed before
    sending a request line. Raises BadRequest for what no route can answer."""
    line = rfile.readline(MAX_LINE + 1)
    for _ in range(LEADING_EMPTY_LINES):
        if line not in (b"\r\n", b"\n"):
            break
        line = rfile.readline(MAX_LINE + 1)
    if not line.strip():
        return None  # closed, or only empty lines: nothing was asked (as http.server)
    if len(line) > MAX_LINE:
        raise BadRequest(414, "request line too long")
    words = line.decode("iso-8859-1").split()
    if len(words) != 3:
        raise BadRequest(400, "bad request syntax")
    method, target, version = words
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise _bad_version(version, method)
    for _ in range(MAX_HEADERS + 1):
        header = rfile.readline(MAX_LINE + 1)
        if len(header) > MAX_LINE:
            raise BadRequest(431, "header line too long", method)
        if header in (b"\r\n", b"\n", b""):
            return Request(method, _path_of(target))
    raise BadRequest(431, "too many headers", method)


def _bad_version(version: str, method: str) -> BadRequest:
    """505 for a well-formed later version (HTTP/2.0 spoken as text), 400 for anything else."""
    major, _, minor = version[5:].partition(".") if version.startswith("HTTP/") else ("", "", "")
    if 0 < len(major) < 4 and major.isdigit() and 0 < len(minor) < 4 and minor.isdigit() and int(major) >= 2:
        return BadRequest(505, "HTTP version not supported", method)
    return BadRequest(400, "bad request version", method)


def _path_of(target: str) -> str:
    """The path asked for: no query string, and leading slashes collapsed as `http.server` does
    (`//metrics` is `/metrics`: a base URL ending in a slash joined with `/metrics`)."""
    path = target.split("?", 1)[0]
    return "/" + path.lstrip("/") if path.startswith("//") else path


def http_date(now: Optional[float] = None) -> str:
    """RFC 9110's IMF-fixdate (the C locale's names whatever the process's locale)."""
    t = time.gmtime(time.time() if now is None else now)
    return (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")


def answer(code: int, ctype: str, body: bytes, server: str, head: bool = False) -> bytes:
    """The whole answer: status line, headers, and the body unless the request was HEAD."""
    lines = (f"HTTP/1.0 {code} {REASONS.get(code, 'Unknown')}", f"Server: {server}", f"Date: {http_date()}",
             f"Content-Type: {ctype}", f"Content-Length: {len(body)}", "Connection: close", "", "")
    return "\r\n".join(lines).encode("latin-1") + (b"" if head else body)

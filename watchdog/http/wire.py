"""The endpoint's HTTP on the wire: one request read within limits, one answer written, the
connection closed (HTTP/1.0, as `http.server`'s handler answers by default).

Not `http.server`: it imports `http.client`, which imports `ssl` (libssl and libcrypto, 4-5 MB
resident, measured by bench/bench_resident.py) and the `email` package to parse headers the
endpoint never reads. The endpoint answers GET and HEAD of a few fixed paths; what it needs of a
request is the method and the path, and that the request ends (its headers read to the blank
line) so a client waiting for its answer gets one. The limits are `http.server`'s: a request or
header line up to 64 KiB (414, 431 beyond), at most 100 headers (431).
"""

from __future__ import annotations

import time
from typing import NamedTuple, Optional

from watchdog.compat import Protocol  # 3.7: from typing_extensions

MAX_LINE = 65536
MAX_HEADERS = 100

REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
           414: "Request-URI Too Long", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable"}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


class Lines(Protocol):
    """What a request is read from (the connection's buffered reader)."""

    def readline(self, __size: int = -1) -> bytes: ...  # noqa: N807 (positional-only, 3.7 style)


class Request(NamedTuple):
    method: str
    path: str  # without the query string


class BadRequest(Exception):
    """A request that gets an error answer instead of a route's (`code`, `text`)."""

    def __init__(self, code: int, text: str):
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text


def read_request(rfile: Lines) -> Optional[Request]:
    """The request on `rfile`, its headers read and dropped; None when the client closed before
    sending a request line. Raises BadRequest for what no route can answer."""
    line = rfile.readline(MAX_LINE + 1)
    if not line:
        return None
    if len(line) > MAX_LINE:
        raise BadRequest(414, "request line too long")
    words = line.decode("iso-8859-1").split()
    if len(words) != 3 or not words[2].startswith("HTTP/"):
        raise BadRequest(400, "bad request syntax")
    for _ in range(MAX_HEADERS + 1):
        header = rfile.readline(MAX_LINE + 1)
        if len(header) > MAX_LINE:
            raise BadRequest(431, "header line too long")
        if header in (b"\r\n", b"\n", b""):
            return Request(words[0], words[1].split("?", 1)[0])
    raise BadRequest(431, "too many headers")


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

"""Fake chat/alert endpoints on 127.0.0.1 that answer like the real vendors.

One `Receiver` per channel type: it records every request, verifies Feishu and DingTalk
signatures and each vendor's size limit (answering with the vendor's own error body, as the real
service does), and can be scripted to answer 429 + Retry-After, 500, HTTP-200 error bodies, or to
answer slower than the client's timeout. `closed_port()` gives a port where nothing listens
(connection refused).

Use from tests, the demo or fleet tests:

    with Receiver("feishu", secret="s3cret") as rx:       # rx.url is the webhook URL
        ...                                                 # configure a channel with url=rx.url
        rx.wait_for(1)                                      # the recorded requests (Recorded)
        rx.script(Answer(429, headers={"Retry-After": "1"}), Answer(500))

or as a process: `python -m tests.fakes.receivers --kind slack --port 8999` (prints the URL, logs
each request as one JSON line on stdout).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

from watchdog.demo.ports import free_port

KINDS = ("feishu", "slack", "dingtalk", "wecom", "webhook", "alertmanager", "deadman")
DEFAULT_PATHS = {
    "feishu": "/open-apis/bot/v2/hook/fake-feishu-token",
    "slack": "/services/T000/B000/fake-slack-token",
    "dingtalk": "/robot/send?access_token=fake-dingtalk-token",
    "wecom": "/cgi-bin/webhook/send?key=fake-wecom-key",
    "webhook": "/hook",
    "alertmanager": "",
    "deadman": "/ping/fake-deadman-token",
}


@dataclass
class Answer:
    """A scripted answer: status, body (dict -> JSON), headers, and a delay before answering.

    `drip`: seconds between single bytes of the whole answer (status line, headers, body), like a
    receiver behind a choking link. `endless`: after the headers, body bytes until the client
    hangs up (an answer that never ends)."""

    status: int = 200
    body: Any = None
    headers: Dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drip: float = 0.0
    endless: bool = False


@dataclass
class Recorded:
    method: str
    path: str
    query: Dict[str, str]
    headers: Dict[str, str]
    body: bytes
    time: float
    status: int = 0
    answer: str = ""
    #: True when the vendor would have accepted (and shown) the message.
    accepted: bool = False

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except ValueError:
            return None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def closed_port() -> int:
    """A local port with nothing listening: connecting to it is refused. Outside the ephemeral range
    (watchdog/demo/ports.py), so no server of another test binding port 0 can be handed it."""
    return free_port()


def feishu_expected_sign(secret: str, timestamp: str) -> str:
    key = f"{timestamp}\n{secret}".encode("utf-8")
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


def dingtalk_expected_sign(secret: str, timestamp: str) -> str:
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}\n{secret}".encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(mac).decode("ascii")


class Receiver:
    """A vendor look-alike HTTP server; `kind` picks the answers and the checks."""

    def __init__(self, kind: str = "webhook", port: int = 0, secret: Optional[str] = None,
                 path: Optional[str] = None, bearer: Optional[str] = None,
                 tls: Optional[Tuple[str, str]] = None):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        self.kind = kind
        self.secret = secret
        self.bearer = bearer
        #: (certificate file, key file): served over HTTPS (`url` says https).
        self.tls = tls
        self.path = DEFAULT_PATHS[kind] if path is None else path
        self.requests: List[Recorded] = []
        #: Requests whose handling began (recorded in `requests` only once answered).
        self.arrived = 0
        self._script: List[Answer] = []
        #: While set and not yet opened, every request waits here before its answer (see `hold`).
        self._gate: Optional[threading.Event] = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._port = port
        self.server: Optional[ThreadingHTTPServer] = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "Receiver":
        rx = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                rx._handle(self, body)

            def do_GET(self) -> None:  # noqa: N802
                rx._handle(self, b"")

            def log_message(self, *a: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", self._port), Handler)
        if self.tls is not None:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self._port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, name=f"rx-{self.kind}", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._port}{self.path}"

    # -- scripting and inspection -----------------------------------------------------------
    def script(self, *answers: Answer) -> None:
        """Answers used, in order, before the vendor's normal behaviour resumes."""
        with self._lock:
            self._script.extend(answers)

    def hold(self, gate: threading.Event) -> None:
        """Requests that arrive from now on get their (normal) answer only once `gate` is set: the
        vendor has the message, the sender does not know yet (a test kills the sender meanwhile)."""
        with self._lock:
            self._gate = gate

    def accepted(self) -> List[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.accepted]

    def wait_for(self, n: int = 1, timeout: float = 60.0, accepted: bool = True) -> List[Recorded]:
        """Block until `n` (accepted) requests arrived; returns them."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [r for r in self.requests if r.accepted or not accepted]
                if len(got) >= n:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.kind} receiver: {len(got)} of {n} requests after {timeout}s "
                                         f"(all: {[(r.status, r.answer[:80]) for r in self.requests]})")
                self._cond.wait(min(left, 0.5))

    def wait_arrived(self, n: int = 1, timeout: float = 60.0) -> None:
        """Block until `n` requests reached the handler (answered or not yet)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.arrived >= n, timeout):
                raise AssertionError(f"{self.kind} receiver: {self.arrived} of {n} requests arrived after {timeout}s")

    # -- the vendor's behaviour --------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        parts = urllib.parse.urlsplit(h.path)
        query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        rec = Recorded(h.command, parts.path, query, {k: v for k, v in h.headers.items()}, body, time.time())
        with self._cond:
            self.arrived += 1
            self._cond.notify_all()
            scripted = self._script.pop(0) if self._script else None
            gate = self._gate
        ans = scripted if scripted is not None else self._verdict(rec)
        if gate is not None:
            gate.wait(120)
        if ans.delay:
            time.sleep(ans.delay)
        payload = ans.body
        if isinstance(payload, (dict, list)):
            data = json.dumps(payload).encode("utf-8")
            ctype = "application/json"
        else:
            data = (payload or "").encode("utf-8")
            # Slack's incoming webhooks answer `ok` (and their errors) as text/html, as the real
            # service does (slackapi/node-slack-sdk#480, grafana/alerting#67).
            ctype = "text/html" if self.kind == "slack" else "text/plain; charset=utf-8"
        if any(k.lower() == "content-type" for k in ans.headers):
            ctype = next(v for k, v in ans.headers.items() if k.lower() == "content-type")
        rec.status = ans.status
        rec.answer = data.decode("utf-8", "replace")
        rec.accepted = scripted is None and self._is_success(ans)
        with self._cond:
            self.requests.append(rec)
            self._cond.notify_all()
        try:
            if ans.drip or ans.endless:
                self._misbehave(h, ans, ctype, data)
                return
            h.send_response(ans.status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(data)))
            for k, v in ans.headers.items():
                if k.lower() != "content-type":
                    h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (read timeout): the request is still recorded

    def _misbehave(self, h: BaseHTTPRequestHandler, ans: Answer, ctype: str, data: bytes) -> None:
        """Answer a byte at a time (`drip`) and/or without end (`endless`), until the client hangs up."""
        h.close_connection = True
        length = 1 << 40 if ans.endless else len(data)
        head = (f"HTTP/1.1 {ans.status} X\r\nContent-Type: {ctype}\r\nContent-Length: {length}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in ans.headers.items()) + "\r\n").encode("latin-1")
        out = head + (b"" if ans.endless else data)
        if not ans.drip:
            h.wfile.write(out)
        for i in range(len(out) if ans.drip else 0):
            h.wfile.write(out[i:i + 1])
            h.wfile.flush()
            time.sleep(ans.drip)
        chunk = b"x" * 65536
        while ans.endless:  # the client's cap ends this with a reset or a broken pipe
            h.wfile.write(chunk)
            time.sleep(ans.drip or 0.001)

    def _is_success(self, ans: Answer) -> bool:
        if not 200 <= ans.status < 300:
            return False
        if isinstance(ans.body, dict):
            if "code" in ans.body:
                return ans.body["code"] == 0
            if "errcode" in ans.body:
                return str(ans.body["errcode"]) == "0"
        return True

    def _verdict(self, rec: Recorded) -> Answer:
        expected_path = urllib.parse.urlsplit(self.path).path
        if self.kind == "alertmanager":
            expected_path = "/api/v2/alerts"
        if rec.path != expected_path:
            return Answer(404, {"code": 404, "msg": "not found"} if self.kind == "feishu" else "no_service")
        if self.bearer is not None and rec.headers.get("Authorization") != f"Bearer {self.bearer}":
            return Answer(401, "unauthorized")
        data = rec.json
        if self.kind == "deadman":
            return Answer(200, "OK")
        if self.kind == "feishu":
            if len(rec.body) > 20 * 1024:
                return Answer(400, {"code": 9499, "msg": "Bad Request", "data": {}})
            if not isinstance(data, dict) or data.get("msg_type") not in ("text", "post", "interactive", "image", "share_chat"):
                return Answer(200, {"code": 9499, "msg": "Bad Request", "data": {}})
            if self.secret is not None:
                ts, sign = str(data.get("timestamp", "")), data.get("sign")
                fresh = ts.isdigit() and abs(time.time() - int(ts)) <= 3600
                if not fresh or sign != feishu_expected_sign(self.secret, ts):
                    return Answer(200, {"code": 19021, "data": {},
                                        "msg": "sign match fail or timestamp is not within one hour from current time"})
            return Answer(200, {"StatusCode": 0, "StatusMessage": "success", "code": 0, "data": {}, "msg": "success"})
        if self.kind == "slack":
            if not isinstance(data, dict) or not (data.get("text") or data.get("blocks")):
                return Answer(400, "no_text")
            for b in data.get("blocks") or []:
                if b.get("type") == "section" and len((b.get("text") or {}).get("text", "")) > 3000:
                    return Answer(400, "invalid_blocks")
                if b.get("type") == "header" and len((b.get("text") or {}).get("text", "")) > 150:
                    return Answer(400, "invalid_blocks")
            if len(data.get("blocks") or []) > 50:
                return Answer(400, "invalid_blocks")
            return Answer(200, "ok")
        if self.kind == "dingtalk":
            if rec.query.get("access_token", "") == "":
                return Answer(200, {"errcode": 300001, "errmsg": "token is not exist"})
            if self.secret is not None:
                ts, sign = rec.query.get("timestamp", ""), rec.query.get("sign", "")
                fresh = ts.isdigit() and abs(time.time() * 1000 - int(ts)) <= 3600 * 1000
                if not fresh or sign != dingtalk_expected_sign(self.secret, ts):
                    return Answer(200, {"errcode": 310000, "errmsg": "sign not match, more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]"})
            if not isinstance(data, dict) or data.get("msgtype") not in ("text", "markdown", "link", "actionCard", "feedCard"):
                return Answer(200, {"errcode": 40035, "errmsg": "缺少参数 json"})
            return Answer(200, {"errcode": 0, "errmsg": "ok"})
        if self.kind == "wecom":
            if not rec.query.get("key"):
                return Answer(200, {"errcode": 93000, "errmsg": "invalid webhook url"})
            if not isinstance(data, dict) or data.get("msgtype") not in ("text", "markdown", "markdown_v2", "news"):
                return Answer(200, {"errcode": 40008, "errmsg": "invalid message type"})
            content = (data.get(data["msgtype"]) or {}).get("content", "")
            limit = 2048 if data["msgtype"] == "text" else 4096
            if len(content.encode("utf-8")) > limit:
                return Answer(200, {"errcode": 40058, "errmsg": f"content exceed max length {limit}"})
            return Answer(200, {"errcode": 0, "errmsg": "ok"})
        if self.kind == "alertmanager":
            if not isinstance(data, list) or not all(isinstance(a, dict) and a.get("labels") for a in data):
                return Answer(400, {"code": 400, "message": "labels required"})
            return Answer(200, "")
        # generic webhook: the Alertmanager v4 shape
        if not isinstance(data, dict) or data.get("version") != "4" or not isinstance(data.get("alerts"), list):
            return Answer(400, "expected an Alertmanager v4 webhook payload")
        return Answer(200, "")


def main() -> None:  # pragma: no cover - manual / demo use
    ap = argparse.ArgumentParser(description="Run a fake vendor endpoint on 127.0.0.1.")
    ap.add_argument("--kind", choices=KINDS, default="webhook")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--secret")
    ap.add_argument("--bearer")
    args = ap.parse_args()
    rx = Receiver(args.kind, args.port, secret=args.secret, bearer=args.bearer).start()
    print(rx.url, flush=True)
    seen = 0
    try:
        while True:
            time.sleep(0.2)
            with rx._lock:
                new = rx.requests[seen:]
                seen = len(rx.requests)
            for r in new:
                print(json.dumps({"time": r.time, "path": r.path, "status": r.status, "accepted": r.accepted,
                                  "answer": r.answer, "body": r.json if r.json is not None else r.text},
                                 ensure_ascii=False), flush=True)
    except KeyboardInterrupt:
        rx.stop()


if __name__ == "__main__":  # pragma: no cover
    main()

"""A receiver's error answer that quotes the hook token near its 200th character, or in another
letter case: the whole answer is scrubbed before the verdict cuts it to 200 characters, so no
part of the token reaches the daemon's log, the outbox's last_error or `test-alert`'s output."""

from __future__ import annotations

import pytest

from tests.fakes.receivers import Answer, Receiver
from tests.message_kit import channel, nan_on_8_ranks

TOKEN = "T0kenInTheHookPath9876543210"


@pytest.mark.parametrize("kind,body", [("webhook", "A" * 190 + " " + TOKEN),
                                       ("feishu", {"code": 19001, "msg": "x" * 190 + " " + TOKEN})])
def test_a_cut_answer_keeps_no_part_of_the_token(kind, body):
    with Receiver(kind, path="/hook/" + TOKEN) as rx:
        rx.script(Answer(400, body=body))
        v = channel(kind, rx.url).deliver(nan_on_8_ranks())
    assert not v.ok
    assert TOKEN[:8] not in v.line(), v.line()


@pytest.mark.parametrize("echo", [TOKEN.lower(), TOKEN.upper()])
def test_an_answer_echoing_the_token_in_another_case_is_scrubbed(echo):
    with Receiver("webhook", path="/hook/" + TOKEN) as rx:
        rx.script(Answer(403, body=f"bad token: {echo}"))
        v = channel("webhook", rx.url).deliver(nan_on_8_ranks())
    assert not v.ok and "bad token" in v.line()
    assert echo not in v.line() and TOKEN.lower()[:10] not in v.line().lower(), v.line()


def test_an_echo_of_the_basic_auth_header_and_a_re_encoded_token_is_scrubbed(tmp_path, make_daemon):
    """A receiver or proxy echoing the request in its error answer (httpbin's /anything does):
    the `Authorization: Basic base64(user:password)` the HTTP library made of the URL's userinfo,
    and the token query value percent-encoded twice. Both reached the daemon's log and the
    outbox row in alerting.sqlite3 before."""
    import base64
    import json
    import threading
    import time
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.helpers import wait_for

    password, token = "Pw9xQzL7mK2vT8rB", "tok+en/ABC=4412xyz"
    seen = []

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.headers.get("Authorization", ""))
            body = json.dumps({"error": "unauthorized", "auth": self.headers.get("Authorization", ""),
                               "path": urllib.parse.quote(self.path, safe="")}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://oncall:{password}@127.0.0.1:{srv.server_address[1]}/hook?token={urllib.parse.quote(token, safe='')}"
        d = make_daemon({"probes": {"jitter": "0s", "commands": [
            {"name": "reach", "argv": ["/bin/false"], "interval": "1s", "timeout": "5s"}]},
            "alerting": {"group_window": "1s", "channels": [{"type": "webhook", "name": "hook", "url": url}]}})
        wait_for(lambda: len(seen) >= 2, timeout=90, what="two attempts")
        time.sleep(1)
        b64 = base64.b64encode(f"oncall:{password}".encode()).decode()
        assert seen[0] == "Basic " + b64  # what the library sent, and the receiver echoed
        twice = urllib.parse.quote(urllib.parse.quote(token, safe=""), safe="")
        assert "attempt 1 of notification" in d.log()
        kept = "".join(f.read_bytes().decode("latin-1") for f in (tmp_path / "state").rglob("*") if f.is_file())
        for text in (d.log(), kept, json.dumps(d.status())):
            for needle in (b64, b64.rstrip("="), twice, password, token):
                assert needle.lower() not in text.lower(), needle
    finally:
        srv.shutdown()

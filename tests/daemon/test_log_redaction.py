"""Every line the daemon logs passes the config's secrets' redaction, a library's too: a receiver
answering with a malformed header line makes urllib3 log `Failed to parse headers (url=<the
webhook URL>)` at WARNING, which reached the log whole before."""

from __future__ import annotations

import socket
import threading

from tests.helpers import wait_for

URL_TOKEN = "T0kenInTheHookPath9876543210"


def _bad_header_server():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    got = []

    def run():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                d = c.recv(65536)
                if not d:
                    break
                data += d
            head, _, rest = data.partition(b"\r\n\r\n")
            n = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")), 0)
            while len(rest) < n:
                d = c.recv(65536)
                if not d:
                    break
                rest += d
            got.append(head)
            body = b'{"ok":true}'
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Broken header line\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            c.close()

    threading.Thread(target=run, daemon=True).start()
    return s, got


def test_a_receiver_with_a_malformed_header_does_not_put_the_url_in_the_log(tmp_path, make_daemon):
    srv, got = _bad_header_server()
    try:
        url = f"http://127.0.0.1:{srv.getsockname()[1]}/hook/{URL_TOKEN}"
        d = make_daemon({
            "probes": {"jitter": "0s", "commands": [
                {"name": "reach", "argv": ["/bin/false"], "interval": "1s", "timeout": "5s"}]},
            "alerting": {"group_window": "1s", "channels": [{"type": "webhook", "name": "hook", "url": url}]}})
        wait_for(lambda: got, timeout=90, what="the page")
        wait_for(lambda: "delivered" in d.log(), timeout=30, what="the delivery")
        assert URL_TOKEN not in d.log(), d.log()[-2000:]
    finally:
        srv.close()


def test_test_alert_through_a_malformed_header_does_not_print_the_url(tmp_path):
    """`test-alert` (like every command that loads a config and then logs: probe, snapshot,
    doctor, discover, relay, run) logs through the daemon's redaction (`commands.log_for`). Before,
    `test-alert` set up no logging at all, so the library's warning about the receiver was dropped
    (nothing on stderr), and `probe` and `snapshot` logged without the config's secrets."""
    import json

    from tests.helpers import run_cli

    srv, got = _bad_header_server()
    try:
        url = f"http://127.0.0.1:{srv.getsockname()[1]}/hook/{URL_TOKEN}"
        cfg = tmp_path / "config.yaml"
        cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state")},
                                   "alerting": {"channels": [{"type": "webhook", "name": "hook", "url": url}]}}))
        res = run_cli("test-alert", "-c", str(cfg))
        assert got, res.stderr
        assert "Failed to parse headers" in res.stderr, res.stderr  # the library's warning is logged ...
        assert URL_TOKEN not in res.stderr + res.stdout, res.stderr  # ... without the URL's token
    finally:
        srv.close()

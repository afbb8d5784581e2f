"""The demo's webhook receiver: prints each Slack message the way the on-call person reads it,
and records the Alertmanager-style webhook copies for the timeline.

Listens on 127.0.0.1 only. `/slack` takes Slack incoming-webhook payloads, `/hook` takes the
generic `webhook` channel's JSON (Alertmanager webhook v4 shape).
"""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, TextIO


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


@dataclass
class Received:
    at: float
    path: str
    body: Dict[str, Any]


@dataclass
class Receiver:
    out: TextIO = sys.stdout
    echo: bool = True
    received: List[Received] = field(default_factory=list)
    on_message: Optional[Callable[[Received], None]] = None
    #: 0 picks a free port; a fixed port lets a test bring the endpoint back where it was.
    port: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw.decode("utf-8"))
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                item = Received(time.time(), self.path, body)
                with receiver._lock:
                    receiver.received.append(item)
                if receiver.echo and self.path.startswith("/slack"):
                    receiver.print_slack(body, item.at)
                if receiver.on_message:
                    receiver.on_message(item)
                reply = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_a: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="receiver", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hooks(self) -> List[Received]:
        with self._lock:
            return [r for r in self.received if r.path.startswith("/hook")]

    def print_slack(self, body: Dict[str, Any], at: float) -> None:
        lines: List[str] = []
        for block in body.get("blocks", []):
            kind = block.get("type")
            if kind == "header":
                lines.append(block["text"]["text"])
                lines.append("=" * min(len(block["text"]["text"]), 76))
            elif kind == "section":
                for para in block["text"]["text"].splitlines():
                    lines.extend(textwrap.wrap(para, 76, subsequent_indent="    ") or [""])
            elif kind == "divider":
                lines.append("-" * 40)
            elif kind == "context":
                lines.append(" ".join(e.get("text", "") for e in block.get("elements", [])))
        if not lines:
            lines = [body.get("text", "")]
        stamp = time.strftime("%H:%M:%S", time.localtime(at))
        box = "\n".join("  | " + l for l in lines)
        self.out.write(f"\n  [{stamp}] message to the on-call channel:\n{box}\n\n")
        self.out.flush()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

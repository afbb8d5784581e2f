"""The demo's webhook receiver: prints each Slack message the way the on-call person reads it,
and records the Alertmanager-style webhook copies for the timeline.

Listens on 127.0.0.1 only. `/slack` takes Slack incoming-webhook payloads, `/hook` takes the
generic `webhook` channel's JSON (Alertmanager webhook v4 shape).
"""

from __future__ import annotations

import json
import re
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


_LINK = re.compile(r"<([^<>|]+)\|([^<>]+)>")
_BARE_LINK = re.compile(r"<((?:https?|mailto):[^<>|]+)>")
_MENTION = re.compile(r"<!(here|channel|everyone)>|<@([A-Z0-9]+)>")
# One per mark, each span bounded: linear time on any text (message text carries log lines).
_EMPHASIS = [re.compile(rf"(?<![\w{m}])\{m}([^\s{m}](?:[^\n{m}]{{0,300}}[^\s{m}])?)\{m}(?![\w{m}])") for m in "*_~"]


def strip_mrkdwn(text: str) -> str:
    """Slack mrkdwn as plain terminal text: links as `label (url)`, no `*`/`_`/`~`/backtick marks,
    mentions as `@here`, and the three escaped characters back."""
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})", text)
    text = _BARE_LINK.sub(r"\1", text)
    text = _MENTION.sub(lambda m: "@" + (m.group(1) or m.group(2)), text)
    text = text.replace("```", "").replace("`", "")
    for emphasis in _EMPHASIS:
        text = emphasis.sub(r"\1", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def plain_lines(body: Dict[str, Any], width: int = 76) -> List[str]:
    """The lines of a Slack Block Kit message, markup stripped and wrapped for a terminal."""
    lines: List[str] = []
    for block in body.get("blocks", []):
        kind = block.get("type")
        if kind == "header":
            title = strip_mrkdwn(block["text"]["text"])
            lines += [title, "=" * min(len(title), width)]
        elif kind == "section":
            for para in strip_mrkdwn(block["text"]["text"]).splitlines():
                # Links and commands stay whole (copyable): no breaks at hyphens or inside words.
                lines.extend(textwrap.wrap(para, width, subsequent_indent="    ", break_on_hyphens=False,
                                           break_long_words=False) or [""])
        elif kind == "divider":
            lines.append("-" * 40)
        elif kind == "context":
            lines.append(strip_mrkdwn(" ".join(e.get("text", "") for e in block.get("elements", []))))
    return lines or [strip_mrkdwn(body.get("text", ""))]


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

    def slack_since(self, t: float) -> List[Received]:
        with self._lock:
            return [r for r in self.received if r.path.startswith("/slack") and r.at >= t]

    def print_slack(self, body: Dict[str, Any], at: float, max_lines: int = 0) -> None:
        """Print one message as the on-call person reads it; `max_lines` > 0 cuts it, saying so."""
        lines = plain_lines(body)
        if max_lines and len(lines) > max_lines:
            cut = len(lines) - max_lines
            lines = lines[:max_lines] + [f"... {cut} more line(s); --verbose prints whole messages"]
        stamp = time.strftime("%H:%M:%S", time.localtime(at))
        box = "\n".join("  | " + l for l in lines)
        self.out.write(f"\n  [{stamp}] message to the on-call channel:\n{box}\n\n")
        self.out.flush()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""The relay process: an HTTP endpoint for Alertmanager's webhook, incident bookkeeping, and the
node daemon's outbox and channels for delivery (rate limits, retries, signatures, redaction).

One payload is handled at a time (a lock): the two peers of an HA Alertmanager may post the same
group at once, and the second must see the first one's record.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

from watchdog.alerting.deliver.outbox import Outbox
from watchdog.alerting.words.render import Message
from watchdog.config.types import secret_value
from watchdog.core.findings import SEVERITY_RANK
from watchdog.relay.config import RelayConfig
from watchdog.relay.incident import (Incident, PayloadError, incident_key, load_payload, message_body,
                                     parse_payload, resolved_body)
from watchdog.relay.store import RelayStore

log = logging.getLogger("watchdog.relay")
#: Longest wait for any read of a request (a client that trickles cannot hold a thread longer).
READ_TIMEOUT = 10.0
#: How long a request waits for room under `max_bodies_bytes` before it is answered 503.
BUDGET_WAIT = 2.0
#: Retry-After (seconds) of that 503.
RETRY_AFTER = 5


class BodyBudget:
    """The bytes of request bodies held at once (read, decoded, parsed): memory stays bounded
    however many clients post in parallel. A body is admitted when it fits beside those held, or
    when none is held (so one body up to `max_body_bytes` always gets in); otherwise it waits up
    to `wait` seconds for room, then is refused (the caller answers 503 with Retry-After)."""

    def __init__(self, limit: int, wait: float = BUDGET_WAIT):
        self.limit, self.wait = limit, wait
        self.held = 0
        self.refused_total = 0
        self._cond = threading.Condition()

    def acquire(self, size: int) -> bool:
        deadline = time.monotonic() + self.wait
        with self._cond:
            while self.held and self.held + size > self.limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.refused_total += 1
                    return False
                self._cond.wait(left)
            self.held += size
            return True

    def release(self, size: int) -> None:
        with self._cond:
            self.held -= size
            self._cond.notify_all()


class Relay:
    """Turns Alertmanager group notifications into at most one page per incident (and its resolve)."""

    def __init__(self, config: RelayConfig):
        self.config = config
        self.store = RelayStore(config.state_dir)
        self.outbox = Outbox(self.store, config.alerting)
        self._lock = threading.Lock()
        self.token = secret_value(config.bearer_token) if config.bearer_token is not None else ""

    def start(self) -> None:
        self.outbox.start()

    def stop(self) -> None:
        self.outbox.stop()
        self.store.close()

    def handle(self, doc: Any, now: Optional[float] = None, size: int = 0) -> str:
        """One webhook payload; returns what was done (for the log and the HTTP answer)."""
        return self.handle_incident(parse_payload(doc), now, size)

    def handle_incident(self, inc: Incident, now: Optional[float] = None, size: int = 0) -> str:
        """One validated payload (see `handle`)."""
        now = time.time() if now is None else now
        key = incident_key(inc.scope)
        with self._lock:
            seen = self.store.incident(key)
            kind, state = decide(inc, seen, now, self.config.resolved_grace)
            items: List[tuple] = []
            if kind and state is not None:
                if kind == "resolved" and state.get("paged"):
                    body = resolved_body(state["paged"], now)
                else:
                    body = message_body(inc, kind, now, state["started"])
                    state = dict(state, paged=body)
                items = self._route(body)
            if state is not None and state != seen:
                self.store.commit(key, state, items, now - self.config.resolved_grace)
            self.outbox.wake([channel for channel, *_ in items])
        c = inc.counts()
        what = f"{kind} message to {len(items)} channel(s)" if kind else "no message (" + why_quiet(inc, seen) + ")"
        log.info("job %s incident %s (%s): %d alert(s) on %d node(s), %d root, %d bytes: %s", inc.job, key,
                 inc.status, len(inc.alerts), c["nodes"], c["roots"], size, what, extra={"event": "relay_payload"})
        return what

    def _route(self, body: Dict[str, Any]) -> List[tuple]:
        msg = Message(body)
        items = []
        for ch in self.outbox.channels.values():
            if body["status"] == "resolved" and not ch.send_resolved:
                continue
            if SEVERITY_RANK.get(msg.severity, 0) < SEVERITY_RANK[ch.cfg.min_severity]:
                continue
            items.append((ch.name, body["ikey"], body["kind"], body))
        return items

    def authorized(self, header: Optional[str]) -> bool:
        if not self.token:
            return True
        # Digests of equal length: compare_digest's time then tells nothing of the token's length
        # or of how much of it a guess got right.
        given = hashlib.sha256((header or "").encode("utf-8", "surrogateescape")).digest()
        return hmac.compare_digest(given, hashlib.sha256(f"Bearer {self.token}".encode()).digest())


def decide(inc: Incident, seen: Optional[Dict[str, Any]], now: float,
           grace: float) -> Tuple[str, Optional[Dict[str, Any]]]:
    """(message kind or "", the incident record to keep). Pages when an incident opens, once
    more when a root cause turns up in an incident paged on symptoms only, and once when it
    resolves; every other notification of the group is recorded, not sent.

    One incident is one training job, which several Alertmanager groups may report (the shipped
    fast route for root causes, and the job's group): it resolves when every group that reported
    it has resolved, not when the fast group of its root cause does.

    A resolved incident is remembered for `grace` seconds: the peers of an HA Alertmanager do not
    share alert state, so one may report "resolved" while the other, whose view is a few seconds
    older, still reports the same alerts firing. A firing notification after the resolve opens a
    new incident only if some alert in it fired on its node after the resolve (or `grace` passed).
    (Node and relay clocks are compared: keep them in NTP sync.)"""
    has_root = bool(inc.roots)
    is_open = seen is not None and "resolved_at" not in seen
    group = incident_key(inc.group_key)
    if inc.status == "resolved":
        if seen is not None and is_open:
            groups = dict(seen.get("groups") or {}, **{group: "resolved"})
            if all(v == "resolved" for v in groups.values()):
                return "resolved", dict(seen, groups=groups, resolved_at=now)
            return "", dict(seen, groups=groups)
        return "", seen
    if seen is not None and is_open:
        groups = dict(seen.get("groups") or {}, **{group: "firing"})
        if has_root and not seen.get("root"):
            return "firing", dict(seen, root=True, groups=groups)
        return "", dict(seen, groups=groups)
    if seen is not None and now - seen["resolved_at"] < grace and not any(
            a.status == "firing" and a.fired_at > seen["resolved_at"] for a in inc.alerts):
        return "", seen
    return "firing", {"started": now, "root": has_root, "groups": {group: "firing"}}


def why_quiet(inc: Incident, seen: Optional[Dict[str, Any]]) -> str:
    if seen is None:
        return "resolved, never paged"
    if "resolved_at" in seen:
        return "incident resolved; a peer's older view" if inc.status == "firing" else "already resolved"
    if inc.status == "resolved":
        return "another group of the incident still fires"
    return "incident already paged"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(relay: Relay) -> ThreadingHTTPServer:
    limit = relay.config.max_body_bytes
    budget = BodyBudget(relay.config.max_bodies_bytes)

    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/healthz":
                n, oldest = relay.outbox.stats()
                self._send(200, {"status": "ok", "outbox_pending": n, "outbox_oldest_age_seconds": round(oldest, 3),
                                 "open_incidents": relay.store.open_incidents(), "bodies_held_bytes": budget.held,
                                 "bodies_refused_total": budget.refused_total})
            else:
                self._send(404, {"error": "not found (POST /alertmanager, GET /healthz)"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?", 1)[0] not in ("/", "/alertmanager"):
                return self._send(404, {"error": "POST the Alertmanager webhook to /alertmanager"})
            if not relay.authorized(self.headers.get("Authorization")):
                return self._send(401, {"error": "missing or wrong bearer token"})
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._send(411, {"error": "Content-Length required"})
            if length < 0 or length > limit:
                self.close_connection = True  # the body is not read
                return self._send(413, {"error": f"body of {length} bytes is over max_body_bytes ({limit})"})
            if not budget.acquire(length):
                self._discard(length)  # so the client reads the answer (64 KiB held at a time)
                self.close_connection = True
                log.warning("relay: busy, %d bytes of bodies held; a body of %d bytes answered 503", budget.held,
                            length, extra={"event": "relay_busy"})
                return self._send(503, {"error": f"busy: over max_bodies_bytes ({budget.limit}) held at once, "
                                                 f"retry after {RETRY_AFTER}s"}, {"Retry-After": str(RETRY_AFTER)})
            try:
                self._post(length)
            finally:
                budget.release(length)

        def _discard(self, length: int) -> None:
            try:
                while length > 0:
                    chunk = self.rfile.read(min(length, 65536))
                    if not chunk:
                        break
                    length -= len(chunk)
            except OSError:
                pass

        def _post(self, length: int) -> None:
            data = self.rfile.read(length)
            if len(data) < length:
                return self._send(400, {"error": "body ended early"})
            try:
                inc = load_payload(data)
            except PayloadError as exc:
                log.warning("relay: rejected a payload: %s", str(exc)[:300], extra={"event": "relay_rejected"})
                return self._send(400, {"error": str(exc)[:300]})
            del data  # the parsed incident is what is kept while it is recorded
            try:
                what = relay.handle_incident(inc, size=length)
            except Exception as exc:  # the database: Alertmanager retries a 5xx
                log.exception("relay: payload not recorded")
                return self._send(500, {"error": f"not recorded: {type(exc).__name__}"})
            self._send(200, {"status": "ok", "result": what})

        def _send(self, code: int, doc: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> None:
            body = json.dumps(doc).encode("utf-8")
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("http %s", fmt % args)

    return _Server((relay.config.host, relay.config.port), Handler)

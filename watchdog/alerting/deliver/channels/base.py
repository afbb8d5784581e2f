"""What every channel shares: the HTTP call (timeouts, no redirects), the verdict, the scrubbing.

A channel turns a notification body into one HTTP request and reads the vendor's answer into a
`Verdict`: delivered, or failed and whether retrying can help (and when). Vendors report errors in
HTTP-200 bodies (Feishu `code`, DingTalk/WeCom `errcode`), so the body decides before the status.

Secrets: the URL, signing secret, token and header values of a channel are its `secrets()`;
`scrub()` removes them (and any URL path requests puts in its exception text) from every string
that may reach a log, a metric or the outbox's `last_error`.
"""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Mapping, Optional, Set, Tuple, Type, Union

from pydantic import Field

from watchdog import __version__
from watchdog.compat import Literal  # 3.7: from typing_extensions
from watchdog.alerting.deliver.channels.http import MAX_ANSWER_BYTES, Deadline, make_session, read_answer
from watchdog.alerting.decide.notification import Notification
from watchdog.alerting.words.render import Message
from watchdog.config.sections.alerting import AlertingConfig, ChannelConfig
from watchdog.config.types import Secret, secret_value
from watchdog.privacy.redact import secrets_out
from watchdog.words import Words, words

if TYPE_CHECKING:  # imported on the first send (see channels.http.make_session)
    import requests

REDACTED = "<redacted>"
_URL_IN_TEXT = re.compile(r"(url: |url=|https?://)\S+", re.IGNORECASE)


@dataclass
class Verdict:
    """The outcome of one delivery attempt, as the vendor put it."""

    ok: bool
    status: Optional[int]
    detail: str
    retryable: bool = True
    retry_after: Optional[float] = None
    #: The request went out whole and no answer came back (a read timeout, the connection cut
    #: mid-answer): the vendor may have the message, so the next attempt is a possible repeat.
    maybe_delivered: bool = False

    def line(self) -> str:
        code = f"HTTP {self.status}" if self.status is not None else "no HTTP answer"
        if self.ok:
            return f"{code}, delivered ({self.detail})"
        kind = "will retry" if self.retryable else "permanent failure"
        return f"{code}, {kind}: {self.detail}"


def secret_fragments(values: List[str]) -> List[str]:
    """The secret strings plus the parts of URLs a library may print on its own (path, query,
    each query value and path segment long enough to be a token)."""
    out = set()
    for v in values:
        if not v:
            continue
        out.add(v)
        parts = urllib.parse.urlsplit(v) if "://" in v else None
        if parts is not None:
            if parts.path and parts.path != "/":
                out.add(parts.path)
            if parts.query:
                out.add(parts.query)
                for _, qv in urllib.parse.parse_qsl(parts.query):
                    if len(qv) >= 6:
                        once = urllib.parse.quote(qv, safe="")
                        out.update((qv, once, urllib.parse.quote(once, safe="")))  # echoed re-encoded too
            for seg in parts.path.split("/"):
                if len(seg) >= 8:
                    out.add(seg)
            if parts.password:
                out.update(_userinfo_forms(parts.username or "", parts.password))
    return sorted(out, key=len, reverse=True)


def _userinfo_forms(user: str, password: str) -> Set[str]:
    """A URL's password as a receiver may echo it: as written, decoded, and inside the Basic
    `Authorization` header the HTTP library makes of `user:password` (base64, which a proxy's
    error page or a debugging receiver quotes back)."""
    plain_user, plain_pw = urllib.parse.unquote(user), urllib.parse.unquote(password)
    out = {password, plain_pw}
    for u, pw in {(user, password), (plain_user, plain_pw)}:
        b64 = base64.b64encode(f"{u}:{pw}".encode("latin-1", "replace")).decode("ascii")
        out.update((b64, b64.rstrip("=")))
    return {password} | {x for x in out if len(x) >= 4}


def scrub(text: str, secrets: List[str]) -> str:
    """Remove secrets, and every URL-looking token, from a message meant for humans."""
    text = secrets_out(text, secrets, REDACTED)
    return _URL_IN_TEXT.sub(lambda m: m.group(1) + REDACTED if not m.group(1).startswith("http") else REDACTED, text)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import email.utils  # here: a dated Retry-After is rare, and `email` is 0.6 MB the idle daemon does without

    try:
        ts = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, ts - time.time())


#: What an HTML document has near its start, after any prologue or comment.
_HTML_MARKS = ("<!doctype html", "<html", "<head", "<body")


def is_html_page(text: str) -> bool:
    """Whether an answer is a web page: markup (after a BOM and blanks) with a doctype, an
    `<html>`, `<head>` or `<body>` within its first 2 KiB, behind an XML prologue or a comment
    too. Not by its Content-Type: Slack's own success answer is `ok` served as `text/html`, and so
    is any receiver's that returns a bare string (Flask, Express), which were retried until
    `max_age` as if a proxy had answered, one copy of the page per attempt."""
    head = text[:2048].lstrip("\ufeff\u00ef\u00bb\u00bf \t\r\n").lower()
    return head.startswith("<") and any(mark in head for mark in _HTML_MARKS)


def http_verdict(status: int, headers: Dict[str, str], text: str, vendor: bool = False) -> Verdict:
    """The generic reading of an HTTP status (used when the body says nothing). `vendor`: the
    receiver is a chat vendor's API, which never redirects a webhook POST: any redirect is
    something in between (a captive portal, a login proxy) and is retried, not dropped."""
    detail = " ".join(text.split())[:200] or "(empty body)"
    if vendor and 300 <= status < 400:
        return Verdict(False, status, "redirected: the vendor never redirects a webhook, so a captive portal or "
                       "proxy answered (check the node's network path to it)", True)
    if 200 <= status < 300 and is_html_page(text):
        # A proxy, captive portal or login page answered in the receiver's place: nothing was
        # delivered, and counting it as sent would lose the alert in silence.
        return Verdict(False, status, f"an HTML page answered, not the receiver (a proxy or login page?): {detail}",
                       True)
    if 200 <= status < 300:
        return Verdict(True, status, detail)
    if status == 429:
        return Verdict(False, status, f"rate limited: {detail}", True, parse_retry_after(headers.get("Retry-After")))
    if status in (408, 425) or status >= 500:
        return Verdict(False, status, detail, True, parse_retry_after(headers.get("Retry-After")))
    if status == 307:
        # A temporary redirect of the request itself (a receiver being moved, a proxy in front of
        # it): the POST was not processed; not followed (the message would go to another host),
        # not dropped either: retried until the URL answers again or `max_age`. Not 302/303: for a
        # POST they usually mean "done, see elsewhere" (Apps Script web apps, post-redirect-get),
        # and retrying them would deliver the message again at every attempt.
        return Verdict(False, status, "temporary redirect refused (check the URL and any proxy in front of it)", True)
    if 300 <= status < 400:
        return Verdict(False, status, "redirect refused (check the URL)", False)
    return Verdict(False, status, detail, False)


Severity = Literal["info", "warning", "critical"]


class ChatChannelConfig(ChannelConfig):
    """A chat vendor's channel: it can mention people (webhook and Alertmanager carry data, not
    chat text, so they take no `mentions`)."""

    #: Who to mention, per severity of the most severe firing alert in the message. Feishu: open ids
    #: (`ou_...`) or `all`; Slack: `here`, `channel`, user ids `U...`, user groups `S...`;
    #: DingTalk: mobiles, user ids or `all`; WeCom: user ids.
    mentions: Dict[Severity, List[str]] = Field(default_factory=dict)


class SignedChannelConfig(ChatChannelConfig):
    """A chat vendor that signs its requests with a shared secret (Feishu, DingTalk)."""

    #: Signing secret: Feishu (`timestamp` + `sign` in the body) and DingTalk (`SEC...`, signed URL).
    secret: Optional[Secret] = None


class AuthedChannelConfig(ChannelConfig):
    """A receiver of structured data that may ask for credentials (webhook, Alertmanager)."""

    #: Sent as `Authorization: Bearer <token>`.
    bearer_token: Optional[Secret] = None
    #: Extra request headers (values are secrets).
    headers: Dict[str, Secret] = Field(default_factory=dict)


class Channel:
    """Base of every channel type; subclasses build the request and read the answer."""

    #: The config's `type:` for this vendor (the `type` of its config model).
    type = ""
    #: The vendor's config model (its keys; the composition root puts it in the config's union).
    config_model: ClassVar[Type[ChannelConfig]] = ChannelConfig
    cfg: ChannelConfig
    #: Largest body (bytes of serialised JSON) the vendor accepts, with margin.
    max_body = 256 * 1024

    def __init__(self, cfg: ChannelConfig, alerting: AlertingConfig):
        self.cfg = cfg
        self.alerting = alerting
        self.name = cfg.name
        #: A fixed "now" for the times in messages ("3m ago"); None: the clock (set by the docs'
        #: rendered examples so they do not change with every run).
        self.now: Optional[float] = None
        self.url = secret_value(cfg.url)
        self.secret = secret_value(cfg.secret) if isinstance(cfg, SignedChannelConfig) and cfg.secret is not None else ""
        self._secrets = secret_fragments([self.url, self.secret] + self.credentials())

    @property
    def words(self) -> Words:
        """The language this channel writes in: its own, else the engine's. Read per message, so a
        reload that changes only `alerting.language` (which keeps the channel) applies at once."""
        return words(self.cfg.language or self.alerting.language)

    # -- routing ---------------------------------------------------------------------------
    @property
    def send_resolved(self) -> bool:
        return self.alerting.send_resolved if self.cfg.send_resolved is None else self.cfg.send_resolved

    @property
    def repush_every(self) -> Optional[float]:
        """How often this channel's receiver wants every firing alert pushed again, because it
        forgets one it does not hear again (None: it keeps what it was told, as chat does)."""
        return None

    def credentials(self) -> List[str]:
        """The config's secrets besides the URL and signing secret (a token, header values)."""
        return []

    def secrets(self) -> List[str]:
        return list(self._secrets)

    def scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    # -- to implement ----------------------------------------------------------------------
    def payload(self, msg: Message) -> Any:
        raise NotImplementedError

    def verdict(self, status: int, headers: Dict[str, str], text: str) -> Verdict:
        return http_verdict(status, headers, text)

    def request(self, msg: Message) -> Tuple[str, Dict[str, str], bytes]:
        """(url, headers, body) of the HTTP POST for this message."""
        body = json.dumps(self.payload(msg), ensure_ascii=False).encode("utf-8")
        return self.url, self.base_headers(msg), body

    def base_headers(self, msg: Message) -> Dict[str, str]:
        return {"Content-Type": "application/json; charset=utf-8",
                "User-Agent": f"npu-watchdog/{__version__}",
                "Idempotency-Key": msg.ikey}

    @staticmethod
    def body_size(payload: Any) -> int:
        return len(json.dumps(payload, ensure_ascii=False).encode("utf-8"))

    # -- delivery --------------------------------------------------------------------------
    def deliver(self, note: Union[Notification, Mapping[str, Any]],
                session: Optional["requests.Session"] = None) -> Verdict:
        """One attempt at sending `note` (the record the outbox keeps; a plain JSON body, as
        `test-alert` builds, is read into one); never raises, and nothing it returns contains a
        secret."""
        try:
            url, headers, data = self.request(Message(note))
        except Exception as exc:  # a rendering bug must not take the sender down
            return Verdict(False, None, self.scrub(f"cannot render the message: {type(exc).__name__}: {exc}"), False)
        sess = session or make_session()
        deadline = Deadline(self.cfg.attempt_timeout)
        try:
            with deadline:
                resp = sess.post(url, data=data, headers={**headers, "Accept-Encoding": "identity"},
                                 allow_redirects=False, stream=True,
                                 timeout=(self.cfg.connect_timeout, self.cfg.read_timeout))
                try:
                    text, cut = read_answer(resp)
                finally:
                    resp.close()
            status = resp.status_code
            rheaders = dict(resp.headers)
        except Exception as exc:  # requests', urllib3's or the socket's: any of them is a failed attempt
            return self._failed(exc, deadline)
        finally:
            if session is None:
                sess.close()
        if deadline.expired:  # the answer ended when the deadline shut the socket
            return Verdict(False, status, f"no complete answer within the attempt deadline ({self.cfg.attempt_timeout:g}s)",
                           maybe_delivered=True)
        # The known secrets are taken out of the whole answer before a verdict cuts it (a token
        # quoted near the cut would otherwise keep its first part, which no longer is the whole
        # secret); URL-looking words only from the verdict's detail below, since a vendor's JSON
        # ends its message with one (WeCom's `more info at https://...`) and the answer must parse.
        text = secrets_out(text, self._secrets, REDACTED)
        try:
            v = self.verdict(status, rheaders, text)
        except Exception as exc:
            v = Verdict(False, status, f"unreadable answer ({type(exc).__name__})")
        if cut:
            v.detail += f" (answer cut at {MAX_ANSWER_BYTES // 1024} KiB)"
        v.detail = self.scrub(v.detail)
        return v

    def _failed(self, exc: Exception, deadline: Deadline) -> Verdict:
        """The verdict of an attempt that got no usable answer (never contains a secret)."""
        if deadline.expired:
            return Verdict(False, None, f"no complete answer within the attempt deadline ({self.cfg.attempt_timeout:g}s)",
                           maybe_delivered=True)
        import requests  # loaded by the attempt (make_session)

        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return Verdict(False, None, f"connect timeout after {self.cfg.connect_timeout:g}s")
        if isinstance(exc, requests.exceptions.ReadTimeout):
            return Verdict(False, None, f"no answer within the read timeout ({self.cfg.read_timeout:g}s)",
                           maybe_delivered=True)
        if isinstance(exc, requests.exceptions.ConnectionError):
            return Verdict(False, None, "connection failed: " + self.scrub(_root_reason(exc)),
                           maybe_delivered=not _never_connected(exc))
        return Verdict(False, None, self.scrub(f"{type(exc).__name__}: {exc}"), maybe_delivered=True)


def _never_connected(exc: BaseException) -> bool:
    """Whether a ConnectionError happened before the request could leave (refused, no route, a
    name that does not resolve): only then is the next attempt surely not a repeat."""
    import socket
    import ssl

    from urllib3.exceptions import NewConnectionError

    seen = 0
    cur: Optional[BaseException] = exc
    while cur is not None and seen < 10:
        # (a TLS handshake that failed: certificate, protocol; it comes before the request)
        if isinstance(cur, (NewConnectionError, ConnectionRefusedError, socket.gaierror, ssl.SSLError)):
            return True
        nxt = getattr(cur, "reason", None)  # urllib3's MaxRetryError keeps its cause here
        if not isinstance(nxt, BaseException) and cur.args and isinstance(cur.args[0], BaseException):
            nxt = cur.args[0]  # requests wraps urllib3's error as its first argument
        cur = nxt if isinstance(nxt, BaseException) else (cur.__cause__ or cur.__context__)
        seen += 1
    return False


def _root_reason(exc: BaseException) -> str:
    """The innermost cause of a requests ConnectionError ('[Errno 111] Connection refused')."""
    seen = 0
    cur: Optional[BaseException] = exc
    last = str(exc)
    while cur is not None and seen < 10:
        seen += 1
        reason = getattr(cur, "reason", None)
        nxt = reason if isinstance(reason, BaseException) else (cur.__cause__ or cur.__context__)
        if nxt is None and cur.args and isinstance(cur.args[0], BaseException):
            nxt = cur.args[0]
        if nxt is None:
            break
        cur = nxt
        last = str(cur)
    m = re.search(r"\[Errno -?\d+\][^)'\"]*", last)
    return m.group(0).strip() if m else last


def not_vendor_json(status: int, headers: Dict[str, str], text: str, field: str) -> Verdict:
    """The answer of an API that always answers a JSON object with a `field` code, when it did not.

    An HTML page with HTTP 200 (a proxy, a captive portal, a maintenance page) delivered nothing:
    the attempt failed and is retried. Error statuses keep their generic reading."""
    if not 200 <= status < 300:
        return http_verdict(status, headers, text, vendor=True)
    shown = " ".join(text.split())[:120] or "(empty body)"
    what = f"JSON with no {field}" if json_body(text) is not None else "not JSON"
    return Verdict(False, status, f"answer is {what}, so not from the vendor's API: {shown}", True)


def json_body(text: str) -> Optional[Dict[str, Any]]:
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return None
    return data if isinstance(data, dict) else None


def as_int(value: Any) -> Optional[int]:
    """DingTalk/WeCom `errcode` may be a number or a string."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None

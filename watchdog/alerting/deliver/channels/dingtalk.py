"""DingTalk custom robot: markdown, optional signed URL (`timestamp` in ms + `sign` in the query),
mentions through `at`, errors in HTTP-200 bodies (`errcode`, number or string)."""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from typing import Any, Dict, Optional

from watchdog.compat import Literal  # 3.7: from typing_extensions

from watchdog.alerting.deliver.channels.base import Channel, SignedChannelConfig, Verdict, as_int, json_body, not_vendor_json
from watchdog.alerting.words.digest import fit_groups
from watchdog.alerting.words.render import ROBOT_MARKDOWN, Message, buttons, compose, escape_md, mentions_for, repeat_prefix
from watchdog.alerting.words.text import cut_bytes, cut_chars
from watchdog.words import EN, Words

MAX_TEXT_BYTES = 4000
THROTTLED = {130101, 410100}
PERMANENT = {310000: "bad signature, keyword or IP whitelist", 300001: "token does not exist",
             400101: "access token missing", 300005: "token does not exist"}


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's scheme: key = secret, message = `timestamp + "\\n" + secret`; base64, URL-encoded."""
    import hashlib, hmac  # here, at the first signed send: both load libcrypto (see watchdog.compat)

    mac = hmac.new(secret.encode("utf-8"), f"{timestamp_ms}\n{secret}".encode("utf-8"), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(mac).decode("ascii"))


def markdown_body(msg: Message, alerting: Any, max_bytes: int, head: str, tail: str, w: Words = EN,
                  now: Optional[float] = None) -> str:
    """The markdown of DingTalk and WeCom: the title, the rules, links, the tail; at most
    `max_bytes` of UTF-8 (the rules give up detail, then places, never silently). Neither robot's
    markdown has code blocks (DingTalk's: headings, quotes, emphasis, links, images, lists;
    WeCom's `markdown`: inline code on one line only), so log lines are escaped line by line
    (`ROBOT_MARKDOWN`), not fenced as for Slack and Feishu."""
    links = " · ".join(ROBOT_MARKDOWN.link(label, url) for label, url in buttons(msg, alerting, w))

    def build(shown, detail, names) -> str:
        parts = compose(msg, ROBOT_MARKDOWN, shown, detail, names, alerting, now, w=w)
        body = [head, parts.notice] + parts.groups + [parts.more, parts.snapshot, links, tail, parts.footer]
        return "\n\n".join(p for p in body if p)

    text = fit_groups(msg.groups(), build, lambda t: len(t.encode("utf-8")) <= max_bytes, alerting.max_log_lines)
    if len(text.encode("utf-8")) > max_bytes:  # only a pathological title or tail gets here
        text = cut_bytes(text, max_bytes - len(tail.encode("utf-8")) - 8, "\n…") + "\n\n" + tail
    return text


class DingTalkConfig(SignedChannelConfig):
    """A DingTalk custom robot."""

    type: Literal["dingtalk"] = "dingtalk"
    vendor_limits = ((20, 60.0),)


class DingTalkChannel(Channel):
    type = "dingtalk"
    config_model = DingTalkConfig
    cfg: DingTalkConfig

    def payload(self, msg: Message) -> Dict[str, Any]:
        ments = mentions_for(msg, self.cfg.mentions)
        at_all = "all" in ments
        mobiles = [m for m in ments if m.isdigit()]
        users = [m for m in ments if m != "all" and not m.isdigit()]
        w = self.words
        title = msg.title(escape_md, w)
        tail = " ".join("@" + m for m in mobiles + users)
        text = markdown_body(msg, self.alerting, MAX_TEXT_BYTES, f"#### {title}", tail.strip(), w, self.now)
        return {"msgtype": "markdown", "markdown": {"title": cut_chars(repeat_prefix(msg, w) + title, 100, ""), "text": text},
                "at": {"atMobiles": mobiles, "atUserIds": users, "isAtAll": at_all}}

    def request(self, msg: Message):
        url = self.url
        if self.secret:
            ts = int(time.time() * 1000)
            url += ("&" if "?" in url else "?") + f"timestamp={ts}&sign={dingtalk_sign(self.secret, ts)}"
        body = json.dumps(self.payload(msg), ensure_ascii=False).encode("utf-8")
        return url, self.base_headers(msg), body

    def verdict(self, status: int, headers: Dict[str, str], text: str) -> Verdict:
        return errcode_verdict(status, headers, text, THROTTLED, PERMANENT)


def errcode_verdict(status: int, headers: Dict[str, str], text: str, throttled: set, permanent: Dict[int, str]) -> Verdict:
    data = json_body(text)
    if data is None or "errcode" not in data:
        return not_vendor_json(status, headers, text, "errcode")
    code = as_int(data.get("errcode"))
    msg = str(data.get("errmsg", ""))[:200]
    if code == 0 and 200 <= status < 300:
        return Verdict(True, status, f"errcode 0 {msg}".strip())
    detail = f"errcode {data.get('errcode')}: {msg}"
    if code in throttled:
        return Verdict(False, status, detail + " (rate limited)", True, 60.0)
    if code in permanent:
        return Verdict(False, status, f"{detail} ({permanent[code]})", False)
    if 400 <= status < 500 and status not in (408, 429):
        return Verdict(False, status, detail, False)
    return Verdict(False, status, detail, True)

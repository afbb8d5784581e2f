"""Feishu / Lark custom bot: an interactive card (JSON 2.0), header colour by severity, optional
signature (`timestamp` + `sign` in the body), mentions, and the 20 KB body limit."""

from __future__ import annotations

import base64
import time
from typing import Any, Dict, List

from watchdog.compat import Literal  # 3.7: from typing_extensions

from watchdog.alerting.deliver.channels.base import Channel, SignedChannelConfig, Verdict, json_body, not_vendor_json
from watchdog.alerting.words.digest import fit_groups
from watchdog.alerting.words.render import MARKDOWN, Message, buttons, compose, escape_plain, mentions_for, repeat_prefix

COLOURS = {"critical": "red", "warning": "orange", "info": "blue"}
#: Configuration or payload errors: retrying the same request cannot help.
PERMANENT = {19021: "bad signature or clock skew > 1h", 19022: "IP not allowed", 19024: "keyword not found",
             19036: "message too large", 10002: "bad message shape"}
THROTTLED = {11232}


def feishu_sign(secret: str, timestamp: int) -> str:
    """Feishu's scheme: the key is `timestamp + "\\n" + secret`, the message is empty."""
    import hashlib, hmac  # here, at the first signed send: both load libcrypto (see watchdog.compat)

    key = f"{timestamp}\n{secret}".encode("utf-8")
    return base64.b64encode(hmac.new(key, b"", digestmod=hashlib.sha256).digest()).decode("ascii")


def mention_md(ids: List[str]) -> str:
    return " ".join(f"<at id={'all' if i == 'all' else i}></at>" for i in ids)


def button(label: str, url: str) -> Dict[str, Any]:
    """A card 2.0 link button (custom bots may only open URLs, never call back)."""
    return {"tag": "button", "text": {"tag": "plain_text", "content": label}, "type": "default",
            "behaviors": [{"type": "open_url", "default_url": url}]}


class FeishuConfig(SignedChannelConfig):
    """A Feishu / Lark custom bot."""

    type: Literal["feishu"] = "feishu"
    vendor_limits = ((5, 1.0), (100, 60.0))


class FeishuChannel(Channel):
    type = "feishu"
    config_model = FeishuConfig
    cfg: FeishuConfig
    max_body = 20 * 1024 - 600  # room for timestamp and sign

    def payload(self, msg: Message) -> Dict[str, Any]:
        colour = "green" if msg.status == "resolved" else ("grey" if msg.test else COLOURS.get(msg.severity, "blue"))
        ments = mentions_for(msg, self.cfg.mentions)
        w = self.words
        links = [button(label, url) for label, url in buttons(msg, self.alerting, w)]

        def build(shown, detail, names) -> Dict[str, Any]:
            parts = compose(msg, MARKDOWN, shown, detail, names, self.alerting, self.now, w=w)
            elements: List[Dict[str, Any]] = []
            if parts.notice:
                elements.append({"tag": "markdown", "content": parts.notice})
            if ments:
                elements.append({"tag": "markdown", "content": mention_md(ments)})
            for i, text in enumerate(parts.groups):
                if i:
                    elements.append({"tag": "hr"})
                elements.append({"tag": "markdown", "content": text})
            tail = "\n".join(x for x in (parts.more, parts.snapshot) if x)
            if tail:
                elements.append({"tag": "markdown", "content": tail})
            elements.extend(links)
            elements.append({"tag": "markdown", "content": parts.footer, "text_size": "notation"})
            return {"msg_type": "interactive", "card": {
                "schema": "2.0", "config": {"update_multi": True},
                "header": {"title": {"tag": "plain_text", "content": repeat_prefix(msg, w) + msg.title(escape_plain, w)}, "template": colour},
                "body": {"elements": elements}}}

        return fit_groups(msg.groups(), build, lambda p: self.body_size(p) <= self.max_body,
                          self.alerting.max_log_lines)

    def request(self, msg: Message):
        import json

        body = self.payload(msg)
        if self.secret:
            ts = int(time.time())
            body["timestamp"] = str(ts)
            body["sign"] = feishu_sign(self.secret, ts)
        return self.url, self.base_headers(msg), json.dumps(body, ensure_ascii=False).encode("utf-8")

    def verdict(self, status: int, headers: Dict[str, str], text: str) -> Verdict:
        data = json_body(text)
        if data is None or ("code" not in data and "StatusCode" not in data):
            return not_vendor_json(status, headers, text, "code")
        code = data.get("code", data.get("StatusCode"))
        msg = str(data.get("msg", data.get("StatusMessage", "")))[:200]
        if code == 0 and 200 <= status < 300:
            return Verdict(True, status, f"code 0 {msg}".strip())
        detail = f"code {code}: {msg}"
        if code in PERMANENT:
            return Verdict(False, status, f"{detail} ({PERMANENT[code]})", False)
        if code == 9499 and "too many" not in msg.lower():
            return Verdict(False, status, f"{detail} (bad request or body over 20 KB)", False)
        retry = 60.0 if code in THROTTLED or code == 9499 else None
        return Verdict(False, status, detail, True, retry)

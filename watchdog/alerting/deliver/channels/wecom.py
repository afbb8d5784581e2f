"""WeCom (企业微信) group bot: markdown content of at most 4096 bytes, `<@userid>` mentions."""

from __future__ import annotations

from typing import Any, Dict

from watchdog.compat import Literal  # 3.7: from typing_extensions

from watchdog.alerting.deliver.channels.base import Channel, ChatChannelConfig, Verdict
from watchdog.alerting.deliver.channels.dingtalk import errcode_verdict, markdown_body
from watchdog.alerting.words.render import Message, escape_md, mentions_for

MAX_CONTENT_BYTES = 4096
THROTTLED = {45009}
PERMANENT = {93000: "invalid webhook URL (key removed?)", 40058: "invalid parameter or content too long",
             93004: "bot disabled"}


class WeComConfig(ChatChannelConfig):
    """A WeCom group bot."""

    type: Literal["wecom"] = "wecom"
    vendor_limits = ((20, 60.0),)


class WeComChannel(Channel):
    type = "wecom"
    config_model = WeComConfig
    cfg: WeComConfig

    def payload(self, msg: Message) -> Dict[str, Any]:
        ments = " ".join(f"<@{m}>" for m in mentions_for(msg, self.cfg.mentions) if m.replace("_", "").replace("-", "").replace(".", "").isalnum())
        content = markdown_body(msg, self.alerting, MAX_CONTENT_BYTES, f"### {msg.title(escape_md, self.words)}", ments,
                                self.words, self.now)
        return {"msgtype": "markdown", "markdown": {"content": content}}

    def verdict(self, status: int, headers: Dict[str, str], text: str) -> Verdict:
        return errcode_verdict(status, headers, text, THROTTLED, PERMANENT)

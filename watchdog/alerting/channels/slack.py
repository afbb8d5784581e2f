"""Slack incoming webhook: header, one section per alert, context footer, plain-text fallback."""

from __future__ import annotations

from typing import Any, Dict, List

from watchdog.alerting.channels.base import Channel, Verdict, http_verdict
from watchdog.alerting.render import SLACK, Message, alert_text, escape_plain, escape_slack, fit, mentions_for, more_line

SECTION_MAX = 3000
HEADER_MAX = 150
MAX_BLOCKS = 50


def slack_mention(m: str) -> str:
    """Config value -> Slack syntax: here, channel, U123/W123 (users), S123 (user groups)."""
    if m in ("here", "channel", "everyone"):
        return f"<!{m}>"
    if m[:1] in ("U", "W"):
        return f"<@{m}>"
    if m[:1] == "S":
        return f"<!subteam^{m}>"
    return ""


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


class SlackChannel(Channel):
    type = "slack"
    rate_limits = ((1, 1.0),)

    def payload(self, msg: Message) -> Dict[str, Any]:
        ments = " ".join(filter(None, (slack_mention(m) for m in mentions_for(msg, self.cfg.mentions))))
        resolved = msg.status == "resolved"
        fallback = (ments + " " if ments else "") + msg.title(escape_slack)

        def build(lines: int, shown: int) -> Dict[str, Any]:
            blocks: List[Dict[str, Any]] = [
                {"type": "header", "text": {"type": "plain_text", "text": _cut(msg.title(escape_plain), HEADER_MAX),
                                            "emoji": True}},
                {"type": "section", "text": {"type": "mrkdwn", "text": _cut(fallback, SECTION_MAX)}},
            ]
            for a in msg.alerts[: min(shown, MAX_BLOCKS - 5)]:
                blocks.append({"type": "divider"})
                blocks.append({"type": "section", "text": {"type": "mrkdwn",
                                                           "text": alert_text(a, SLACK, lines, resolved=resolved)}})
            more = more_line(len(msg.alerts), min(shown, MAX_BLOCKS - 5))
            if more:
                blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": more}})
            blocks.append({"type": "context", "elements": [
                {"type": "mrkdwn", "text": f"npu-watchdog · {msg.kind} · id {msg.ikey}"}]})
            return {"text": fallback, "blocks": blocks}

        def ok(p: Dict[str, Any]) -> bool:
            return len(p["blocks"]) <= MAX_BLOCKS and all(
                len(b["text"]["text"]) <= SECTION_MAX for b in p["blocks"] if b["type"] == "section")

        return fit(build, ok, self.alerting.max_log_lines, len(msg.alerts))

    def verdict(self, status: int, headers: Dict[str, str], text: str) -> Verdict:
        v = http_verdict(status, headers, text)
        if status == 200 and text.strip() not in ("", "ok"):
            v.detail = text.strip()[:200]
        return v

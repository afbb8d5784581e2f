"""Slack incoming webhook: header, the rules of the message packed into sections, a context line
(dashboard, runbook, counts), the title as plain-text fallback."""

from __future__ import annotations

from typing import Any, Dict, List

from watchdog.compat import Literal  # 3.7: from typing_extensions

from watchdog.alerting.deliver.channels.base import Channel, ChatChannelConfig, Verdict, http_verdict
from watchdog.alerting.words.digest import Style, fit_groups
from watchdog.alerting.words.render import (MENTION_WORDS, ZWSP, Message, compose, escape_plain, md_inline,
                                            mentions_for, repeat_prefix)
from watchdog.alerting.words.text import clean, cut_chars

SECTION_MAX = 3000
HEADER_MAX = 150
MAX_BLOCKS = 50
TEXT_MAX = 40000


def escape_slack(text: Any) -> str:
    """Slack mrkdwn: the three control characters are entities (this defuses `<!here>`, `<@U1>`,
    `<url|label>`), markdown-style links are broken (rendered by newer clients and by anything
    the message is forwarded to), and plain-text `@channel`-style words get a zero-width space."""
    s = clean(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("](", "］(")
    return MENTION_WORDS.sub("@" + ZWSP, s)


def _slack_code(lines: List[str]) -> str:
    """Slack shows `&amp;` `&lt;` `&gt;` as the characters themselves (a copy gives the line back);
    its code blocks know no longer fence, so a triple backtick inside is broken."""
    entities = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))  # `<!here>` and `<@U1>` are text then
    out = []
    for ln in lines:
        for ch, ent in entities:
            ln = ln.replace(ch, ent)
        out.append(ln.replace("```", "'''"))
    return "```\n" + "\n".join(out) + "\n```"


#: Slack's dialect (mrkdwn): how escaped text is marked up.
SLACK = Style(escape_slack, lambda s: f"*{s}*", lambda t, u: f"<{u}|{t}>", _slack_code, md_inline)


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
    return cut_chars(text, n)


def section(text: str) -> Dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def pack(texts: List[str], limit: int) -> List[str]:
    """Consecutive texts joined (blank line between) into as few sections as fit `limit` each."""
    out: List[str] = []
    for t in texts:
        if out and len(out[-1]) + 2 + len(t) <= limit:
            out[-1] += "\n\n" + t
        else:
            out.append(t)
    return out


class SlackConfig(ChatChannelConfig):
    """A Slack incoming webhook."""

    type: Literal["slack"] = "slack"
    vendor_limits = ((1, 1.0),)


class SlackChannel(Channel):
    type = "slack"
    config_model = SlackConfig
    cfg: SlackConfig

    def payload(self, msg: Message) -> Dict[str, Any]:
        ments = " ".join(filter(None, (slack_mention(m) for m in mentions_for(msg, self.cfg.mentions))))
        w = self.words
        fallback = (ments + " " if ments else "") + repeat_prefix(msg, w) + msg.title(escape_slack, w)
        # The Runbook link is in each rule's text already (per rule): the context line carries the
        # dashboard only, so a one-rule message shows one Runbook link, not two.
        links = [SLACK.link(w.t("dashboard"), url) for url in (msg.dashboard(),) if url]

        def build(shown, detail, names) -> Dict[str, Any]:
            parts = compose(msg, SLACK, shown, detail, names, self.alerting, self.now, w=w)
            blocks: List[Dict[str, Any]] = [
                {"type": "header", "text": {"type": "plain_text", "text": _cut(msg.title(escape_plain, w), HEADER_MAX),
                                            "emoji": True}}]
            if parts.notice:
                blocks.append(section(parts.notice))
            if ments:
                blocks.append(section(ments))
            texts = parts.groups + [x for x in (parts.more, parts.snapshot) if x]
            blocks.extend(section(t) for t in pack(texts, SECTION_MAX))
            context = links + [parts.footer]
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": t} for t in context]})
            return {"text": fallback, "blocks": blocks}

        def ok(p: Dict[str, Any]) -> bool:
            return len(p["blocks"]) <= MAX_BLOCKS and len(p["text"]) <= TEXT_MAX and all(
                len(b["text"]["text"]) <= SECTION_MAX for b in p["blocks"] if b["type"] == "section")

        return fit_groups(msg.groups(), build, ok, self.alerting.max_log_lines)

    def verdict(self, status: int, headers: Dict[str, str], text: str) -> Verdict:
        v = http_verdict(status, headers, text, vendor=True)
        if v.ok and text.strip() not in ("", "ok"):
            v.detail = text.strip()[:200]
        return v

"""Log lines reach the chat platforms with code blocks byte for byte (docs/alerting.md: "log lines
stay exactly as they are"): a line copied from Feishu or Slack greps in the plog it came from.
The code block around them is escaped (a fence no line can close), not the lines; the one change
is a zero-width space that keeps a mention tag (`<at ...>`, `<@id>`) from paging anybody.
DingTalk's and WeCom's robot markdown has no code block: there each line is escaped as text."""

from __future__ import annotations

import html
import re

import pytest

from tests.message_kit import alert, chat_text, deliver, note

#: Real CANN plog and training-log shapes with every character markdown would otherwise eat.
LINES = [
    "[ERROR] RUNTIME(31337,python3):2026-11-30-20:20:00.123.456 [stream.cc:1042] 31337 Sync: "
    "Stream synchronize failed, stream_id=3, errcode=507011",
    "[ERROR] ASCENDCL(31337,python3):2026-11-30-20:20:00.130.001 [tensor_data_transfer.cpp:931]"
    " `*aclrtSynchronizeStream*` failed: EI0002 ~~notify wait~~ timeout",
    "  iteration     5426/  100000 | lm loss: nan | loss scale: 1.0 | grad norm: nan |",
    "# > - + = | _under_ **bold** [link](http://x) <b>tag</b>\tafter a tab",
    "a ``` fence and a ```` longer one inside a line",
]


def _body():
    return note([alert("log_hccl", {"rank": "3", "log_rule": "hccl_notify_timeout"}, 1_764_500_000.0,
                       evidence=LINES, summary="HCCL error (rank 3)")])


def _block(text: str) -> list:
    """The lines of the first fenced block in `text` (the fence is its first run of 3+ backticks)."""
    m = re.search(r"^(`{3,})\n(.*?)\n\1$", text, flags=re.M | re.S)
    assert m, text
    return m.group(2).split("\n")


@pytest.mark.parametrize("kind", ["feishu"])
def test_log_lines_are_byte_exact_in_a_markdown_code_block(kind):
    text = chat_text(kind, deliver(kind, _body()))
    assert _block(text) == LINES, text
    for line in LINES:
        assert line in text
    assert "［" not in text and "∗" not in text


def test_log_lines_in_slack_read_back_exactly():
    """Slack shows its three entities as the characters: what a person copies is the line."""
    text = chat_text("slack", deliver("slack", _body()))
    block = re.search(r"```\n(.*?)\n```", text, flags=re.S).group(1)
    shown = html.unescape(block).split("\n")
    assert shown[:4] == LINES[:4], shown


@pytest.mark.parametrize("kind", ["dingtalk", "wecom"])
def test_log_lines_are_escaped_line_by_line_without_a_fence(kind):
    """Their words stay readable (one line each, the digits and codes as printed); what markdown
    would render (a heading, a link, a tag, emphasis, a fence) is defused."""
    text = chat_text(kind, deliver(kind, _body()))
    assert "```" not in text
    for keep in ("Stream synchronize failed, stream_id=3, errcode=507011", "EI0002", "lm loss: nan",
                 "after a tab", "iteration     5426/  100000"):
        assert keep in text, (kind, keep)
    for live in ("](http://x)", "<b>", "**bold**", "\n# >"):
        assert live not in text, (kind, live)


@pytest.mark.parametrize("kind", ["feishu", "wecom"])
def test_a_mention_tag_in_a_log_line_pings_nobody(kind):
    lines = ['user said <at id=all></at> and <@zhangsan> in a log line']
    body = note([alert("log_custom", {"rank": "0", "log_rule": "mine"}, 1_764_500_000.0, evidence=lines)])
    text = chat_text(kind, deliver(kind, body))
    if kind == "wecom":  # no code block: the line is escaped as text
        assert "<at" not in text and "<@zhangsan" not in text and "user said" in text
        return
    [shown] = _block(text)
    assert "<at" not in shown and "<@" not in shown
    assert shown.replace("\u200b", "") == lines[0]

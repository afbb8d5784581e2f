"""Log lines to DingTalk and WeCom: neither robot's markdown has fenced code blocks (WeCom's
`markdown`: inline code on one line only, "暂不支持跨行"; DingTalk's: headings, quotes, bold,
italic, links, images, lists), so a fence is shown as text and the lines in it rendered: a
training log line's link, image, `<font>` tag or heading would be live. They are escaped line by
line instead (Slack and Feishu keep the fence, which their markdown has)."""

from __future__ import annotations

import time

import pytest

from tests.message_kit import alert, chat_text, deliver, note

LINES = ["RuntimeError: checkpoint corrupt, re-authenticate at [the console](http://evil.example/login)",
         "![](http://evil.example/pixel.png)",
         '<font color="warning">ALL NODES DOWN, page the on-call</font>',
         "# every rank failed"]


@pytest.mark.parametrize("kind", ["dingtalk", "wecom"])
def test_log_line_markup_is_defused_for_vendors_without_code_blocks(kind):
    a = alert("log_nan", {"rank": "0", "log_rule": "nan_loss"}, time.time(), evidence=LINES, summary="NaN")
    text = chat_text(kind, deliver(kind, note([a])))
    assert "](http://evil.example" not in text, text
    assert '<font color="warning">' not in text, text
    assert "\n# every rank failed" not in text, text

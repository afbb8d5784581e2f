"""A vendor's error answer keeps its meaning after the known secrets are taken out of it: WeCom's
and DingTalk's `errmsg` end with a documentation link, and scrubbing URL-looking words before the
verdict broke their JSON (a permanent error retried, a rate limit's 60 s lost). Only the
verdict's detail loses URL-looking words."""
from __future__ import annotations

import pytest

from tests.fakes.receivers import Answer, Receiver
from tests.message_kit import channel, nan_on_8_ranks

WECOM = "more info at https://open.work.weixin.qq.com/devtool/query?e="


@pytest.mark.parametrize("code,retryable", [(93000, False), (45009, True)])
def test_a_wecom_error_answer_with_its_help_link_keeps_its_meaning(code, retryable):
    body = {"errcode": code, "errmsg": f"invalid webhook url, hint: [1692776362], from ip: 10.0.0.1, {WECOM}{code}"}
    with Receiver("wecom") as rx:
        rx.script(Answer(200, body=body))
        v = channel("wecom", rx.url).deliver(nan_on_8_ranks())
    assert not v.ok
    assert f"errcode {code}" in v.line(), v.line()
    assert v.retryable is retryable


def test_a_dingtalk_keyword_error_with_its_help_link_is_permanent():
    body = {"errcode": 310000, "errmsg": "keywords not in content, more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]"}
    with Receiver("dingtalk") as rx:
        rx.script(Answer(200, body=body))
        v = channel("dingtalk", rx.url).deliver(nan_on_8_ranks())
    assert not v.ok and "errcode 310000" in v.line() and v.retryable is False, v.line()

"""A receiver's error answer that quotes the hook token near its 200th character, or in another
letter case: the whole answer is scrubbed before the verdict cuts it to 200 characters, so no
part of the token reaches the daemon's log, the outbox's last_error or `test-alert`'s output."""

from __future__ import annotations

import pytest

from tests.fakes.receivers import Answer, Receiver
from tests.message_kit import channel, nan_on_8_ranks

TOKEN = "T0kenInTheHookPath9876543210"


@pytest.mark.parametrize("kind,body", [("webhook", "A" * 190 + " " + TOKEN),
                                       ("feishu", {"code": 19001, "msg": "x" * 190 + " " + TOKEN})])
def test_a_cut_answer_keeps_no_part_of_the_token(kind, body):
    with Receiver(kind, path="/hook/" + TOKEN) as rx:
        rx.script(Answer(400, body=body))
        v = channel(kind, rx.url).deliver(nan_on_8_ranks())
    assert not v.ok
    assert TOKEN[:8] not in v.line(), v.line()


@pytest.mark.parametrize("echo", [TOKEN.lower(), TOKEN.upper()])
def test_an_answer_echoing_the_token_in_another_case_is_scrubbed(echo):
    with Receiver("webhook", path="/hook/" + TOKEN) as rx:
        rx.script(Answer(403, body=f"bad token: {echo}"))
        v = channel("webhook", rx.url).deliver(nan_on_8_ranks())
    assert not v.ok and "bad token" in v.line()
    assert echo not in v.line() and TOKEN.lower()[:10] not in v.line().lower(), v.line()

"""How a channel reads an HTTP answer it got (watchdog.alerting.deliver.channels.base.http_verdict):
which failures are retried and which drop the message as a configuration error. A 307 dropped a
critical page for good (found by an attack pass); it is retried, not followed. A 302 or 303 is not:
an Apps Script web app answers every POST it ran with 302, so a retry would post again."""

from __future__ import annotations

import pytest

from watchdog.alerting.deliver.channels.base import http_verdict


@pytest.mark.parametrize("status, ok, retryable", [
    (200, True, True), (204, True, True),
    (307, False, True),  # the request redirected as it is: not processed; retried, never followed
    # permanent (the URL is wrong), or for a POST "done, see elsewhere" (retrying would deliver again)
    (301, False, False), (308, False, False), (302, False, False), (303, False, False),
    (429, False, True), (408, False, True), (500, False, True), (503, False, True),
    (400, False, False), (403, False, False), (404, False, False),
])
def test_status_classes(status: int, ok: bool, retryable: bool) -> None:
    v = http_verdict(status, {}, "")
    assert (v.ok, v.retryable) == (ok, retryable), v.line()
    assert not v.maybe_delivered  # an answer came: the vendor said what it did


def test_a_temporary_redirect_says_what_to_check() -> None:
    assert "temporary redirect refused" in http_verdict(307, {"Location": "http://elsewhere/"}, "").line()


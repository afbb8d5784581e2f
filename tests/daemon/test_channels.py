"""Each channel against a local receiver that behaves like the vendor: shapes, signatures, size
limits, hostile log lines, and the vendors' ways of saying no."""

from __future__ import annotations

import html
import json
import re
import time

import pytest
import yaml

from tests.fakes.receivers import Answer, Receiver, closed_port
from tests.message_kit import chat_text
from watchdog.alerting.deliver.channels import build_channel
from watchdog.alerting.deliver.channels.dingtalk import dingtalk_sign
from watchdog.alerting.deliver.channels.feishu import feishu_sign
from watchdog.config.load import load_config_text

HOSTILE = ('<!channel> <!here> <@U123> <at user_id="all">x</at> <at id=all></at> @all @here '
           '[click me](http://evil.example/x) <b>bold</b> <script>alert(1)</script> <font color="red">x</font>')
FENCED = re.compile(r"^(`{3,})\n(.*?)\n\1$", re.M | re.S)
FORBIDDEN = ["<!channel>", "<!here>", "<@U123>", "<at ", "@all", "@here", "](http://evil", "<b>", "<script",
             "<font"]


def channel(kind, url, **extra):
    ch = {"type": kind, "name": f"c-{kind}", "url": url, "min_severity": "info", **extra}
    cfg = load_config_text(yaml.safe_dump({"alerting": {"channels": [ch], "max_log_lines": 10}}))
    return build_channel(cfg.alerting.channels[0], cfg.alerting)


def body(n_alerts=1, evidence=(), kind="firing", severity="critical", summary="NPU 3 lost"):
    now = time.time()
    alerts = []
    for i in range(n_alerts):
        alerts.append({"fp": f"fp{i}", "rule": "npu_missing", "severity": severity, "status": "firing",
                       "summary": summary, "labels": {"host": "node-a", "training_job": "job-a", "npu": str(i)},
                       "hint": "Check `npu-smi info` and dmesg.", "value": "7 of 8", "since": now - 120,
                       "starts_at": now - 60, "ends_at": None, "evidence": list(evidence),
                       "snapshot": "/var/lib/npu-watchdog/snapshots/s1.tar.gz",
                       "dashboard": "https://grafana.example/d/npu-watchdog/npu-watchdog?var-host=node-a"})
    return {"kind": kind, "status": "resolved" if kind == "resolved" else "firing", "ikey": "ikey123",
            "created": now, "group": {"host": "node-a", "training_job": "job-a"}, "alerts": alerts}


def test_signature_vectors_and_the_classic_mixup():
    assert feishu_sign("demo", 1599360473) == "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8="
    assert feishu_sign("demo", 1599360473) != "DkEDUyVoOOJ539qBvUgMyzkzIdRWlf4e/V3Rq+ONJnQ="
    assert dingtalk_sign("SECdemo", 1599360473000) == "tGWkA5eQOQNCNPDgphtxIoNLO%2B%2FgD8Lcb705KQoRzeY%3D"


ALL_KINDS = ["feishu", "slack", "dingtalk", "wecom", "webhook", "alertmanager"]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_delivery_and_message_content(kind):
    secret = "SECsigning-secret" if kind in ("feishu", "dingtalk") else None
    with Receiver(kind, secret=secret) as rx:
        ch = channel(kind, rx.url, **({"secret": secret} if secret else {}))
        v = ch.deliver(body(evidence=["RuntimeError: NPU out of memory"]))
        assert v.ok, v.line()
        [req] = rx.wait_for(1)
        text = req.text
        for needed in ("node-a", "job-a", "npu_missing", "NPU 3 lost", "7 of 8", "npu-smi info",
                       "out of memory", "s1.tar.gz", "grafana.example"):
            assert needed in text, (kind, needed)
        if kind == "feishu":
            assert req.json["card"]["header"]["template"] == "red"
            assert req.json["msg_type"] == "interactive"
        if kind == "slack":
            assert req.json["text"] and req.json["blocks"][0]["type"] == "header"
        if kind == "dingtalk":
            assert req.json["msgtype"] == "markdown" and "sign" in req.query
        if kind == "webhook":
            assert set(req.json) >= {"version", "groupKey", "status", "receiver", "groupLabels", "commonLabels",
                                     "commonAnnotations", "externalURL", "alerts"}
            a = req.json["alerts"][0]
            assert set(a) >= {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
            assert a["endsAt"] == "0001-01-01T00:00:00Z"
        if kind == "alertmanager":
            assert req.path == "/api/v2/alerts" and req.json[0]["labels"]["alertname"] == "npu_missing"
            assert req.json[0]["endsAt"] > req.json[0]["startsAt"]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_hostile_log_line_cannot_mention_or_inject(kind):
    with Receiver(kind) as rx:
        ch = channel(kind, rx.url)
        assert ch.deliver(body(evidence=[HOSTILE], summary="stall in " + HOSTILE)).ok
        [req] = rx.wait_for(1)
        # Decode JSON escapes so the check sees what the vendor renders.
        rendered = json.dumps(req.json, ensure_ascii=False)
        if kind in ("feishu", "slack"):
            # The log line is shown byte for byte in a code block (it must grep in the plog); the
            # block is what is escaped, and the only change to the line defuses a mention.
            # (DingTalk's and WeCom's markdown has no code block: the line is escaped as text,
            # and checked below with the rest of the message.)
            code = "\n".join(b for _, b in FENCED.findall(chat_text(kind, req)))
            shown = html.unescape(code) if kind == "slack" else code.replace("\u200b", "")
            assert shown == HOSTILE, (kind, code)
            for bad in (("<!channel>", "<!here>", "<@U123>") if kind == "slack" else ("<at ", "<@U123>")):
                assert bad not in code, (kind, bad)
            rendered = rendered.replace(json.dumps(code, ensure_ascii=False)[1:-1], "")
        for bad in FORBIDDEN:
            assert bad not in rendered, (kind, bad)
        assert "click me" in rendered and "alert(1)" in rendered  # neutralised, not deleted


def test_configured_mentions_do_reach_the_message():
    with Receiver("feishu") as fs, Receiver("slack") as sl, Receiver("dingtalk") as dt:
        assert channel("feishu", fs.url, mentions={"critical": ["all"]}).deliver(body()).ok
        assert channel("slack", sl.url, mentions={"critical": ["here", "U42"]}).deliver(body()).ok
        assert channel("dingtalk", dt.url, mentions={"critical": ["13800001111"]}).deliver(body()).ok
        assert "<at id=all></at>" in fs.wait_for(1)[0].text
        assert "<!here> <@U42>" in sl.wait_for(1)[0].json["text"]
        assert dt.wait_for(1)[0].json["at"]["atMobiles"] == ["13800001111"]
        # no mention on a warning
        assert channel("feishu", fs.url, mentions={"critical": ["all"]}).deliver(body(severity="warning")).ok
        assert "<at id=all>" not in fs.wait_for(2)[1].text


@pytest.mark.parametrize("kind", ["feishu", "slack", "dingtalk", "wecom"])
def test_alerts_of_one_rule_collapse_into_one_entry_and_the_title_stays(kind):
    lines = ["E" * 290 + f" {i}" for i in range(10)]
    msg = body(n_alerts=30, evidence=lines)
    with Receiver(kind) as rx:
        ch = channel(kind, rx.url)
        v = ch.deliver(msg)
        assert v.ok, v.line()
        [req] = rx.wait_for(1)
        assert "[CRITICAL] node-a/job-a: NPU card lost on NPU 0-29" in req.text
        assert "(30 alerts)" in req.text
        # hint, log lines and snapshot once per rule (not 30 times)
        assert req.text.count("npu-smi info") == 1 and req.text.count("s1.tar.gz") == 1
        assert 0 < req.text.count("E" * 250) <= 10


def test_feishu_bad_signature_is_a_permanent_failure():
    with Receiver("feishu", secret="right") as rx:
        v = channel("feishu", rx.url, secret="wrong").deliver(body())
        assert not v.ok and not v.retryable and v.status == 200 and "19021" in v.detail


def test_feishu_throttled_error_body_with_200_is_retried():
    with Receiver("feishu") as rx:
        rx.script(Answer(200, {"code": 9499, "msg": "too many request", "data": {}}))
        v = channel("feishu", rx.url).deliver(body())
        assert not v.ok and v.retryable and "9499" in v.detail


def test_dingtalk_string_errcode_and_throttling():
    with Receiver("dingtalk") as rx:
        rx.script(Answer(200, {"errcode": "0", "errmsg": "ok"}),
                  Answer(200, {"errcode": "130101", "errmsg": "send too fast, exceed 20 times per minute"}))
        ch = channel("dingtalk", rx.url)
        assert ch.deliver(body()).ok
        v = ch.deliver(body())
        assert not v.ok and v.retryable and v.retry_after == 60.0


def test_wecom_invalid_key_fails_fast():
    with Receiver("wecom", path="/cgi-bin/webhook/send?key=") as rx:
        v = channel("wecom", rx.url).deliver(body())
        assert not v.ok and not v.retryable and "93000" in v.detail


def test_slack_429_retry_after_and_500():
    with Receiver("slack") as rx:
        rx.script(Answer(429, "rate_limited", headers={"Retry-After": "7"}), Answer(500, "boom"),
                  Answer(404, "no_service"))
        ch = channel("slack", rx.url)
        v = ch.deliver(body())
        assert not v.ok and v.retryable and v.retry_after == 7.0
        v = ch.deliver(body())
        assert not v.ok and v.retryable and v.status == 500
        v = ch.deliver(body())
        assert not v.ok and not v.retryable and "no_service" in v.detail


def test_slow_answer_hits_the_read_timeout_and_refused_port_is_reported_without_the_url():
    with Receiver("webhook") as rx:
        rx.script(Answer(200, "", delay=2.0))
        v = channel("webhook", rx.url, read_timeout="500ms").deliver(body())
        assert not v.ok and v.retryable and "read timeout" in v.detail
    token = "tok-sensitive-123456"
    url = f"http://127.0.0.1:{closed_port()}/hook/{token}?key={token}"
    v = channel("slack", url).deliver(body())
    assert not v.ok and v.retryable and "connection failed" in v.detail
    assert token not in v.line() and "/hook/" not in v.line()


def test_webhook_bearer_token_and_headers():
    with Receiver("webhook", bearer="b-token") as rx:
        ch = channel("webhook", rx.url, bearer_token="b-token", headers={"X-Team": "npu"})
        assert ch.deliver(body()).ok
        req = rx.wait_for(1)[0]
        assert req.headers["X-Team"] == "npu" and req.json["idempotencyKey"] == "ikey123"
        v = channel("webhook", rx.url, bearer_token="other").deliver(body())
        assert not v.ok and not v.retryable and v.status == 401


@pytest.mark.parametrize("kind", ["feishu", "dingtalk", "wecom"])
def test_a_page_that_is_not_the_vendors_json_is_not_a_delivery(kind):
    """A proxy or captive portal answering HTTP 200 with HTML has delivered nothing: these APIs
    always answer JSON with a code. The attempt fails and is retried (the row stays queued)."""
    html = "<!doctype html><html><body><h1>Welcome</h1>Please log in to continue.</body></html>"
    with Receiver(kind) as rx:
        rx.script(Answer(200, html), Answer(200, {"unexpected": "shape"}), Answer(502, "<html>bad gateway</html>"))
        ch = channel(kind, rx.url)
        verdicts = [ch.deliver(body()) for _ in range(3)]
        assert all(not v.ok and v.retryable for v in verdicts), [v.line() for v in verdicts]
        assert "not JSON" in verdicts[0].detail and "Welcome" in verdicts[0].detail
        assert "JSON with no" in verdicts[1].detail
        assert ch.deliver(body()).ok  # the vendor answers normally again
        assert len(rx.requests) == 4 and len(rx.accepted()) == 1


def test_a_receiver_dripping_bytes_is_cut_at_the_attempt_deadline():
    """1 byte every 0.2 s never trips the per-read timeout (1 s); the whole answer would take
    about 30 s (headers ~100 bytes, body ~50). The attempt ends at its 2 s deadline instead."""
    with Receiver("feishu") as rx:
        ok = {"code": 0, "msg": "success", "data": {}}
        rx.script(Answer(200, ok, drip=0.2), Answer(200, ok), Answer(200, ok, drip=0.2))
        ch = channel("feishu", rx.url, read_timeout="1s", attempt_timeout="2s")
        v = ch.deliver(body())  # without the deadline: delivered, after ~30 s
        assert not v.ok and v.retryable and "attempt deadline (2s)" in v.detail, v.line()
        # a kept-alive session (as the senders use) is bounded the same way
        from watchdog.alerting.deliver.channels.http import make_session
        with make_session() as s:
            assert ch.deliver(body(), s).ok
            v = ch.deliver(body(), s)
            assert not v.ok and "attempt deadline" in v.detail, v.line()


def test_an_endless_answer_is_read_up_to_the_cap_only():
    with Receiver("webhook") as rx:
        rx.script(Answer(200, "", endless=True), Answer(200, {"errcode": 0}, endless=True))
        v = channel("webhook", rx.url).deliver(body())
        assert v.ok and "answer cut at 64 KiB" in v.detail, v.line()
    with Receiver("wecom") as rx:
        rx.script(Answer(200, "", endless=True))
        v = channel("wecom", rx.url).deliver(body())
        assert not v.ok and v.retryable and "answer cut" in v.detail, v.line()


# An OSC 8 hyperlink, an OSC title set, a DCS string and 8-bit C1 controls, as terminals and
# colouring loggers write them: the sequences' payload (a hidden URL, a title) must not reach the
# message as text, and the visible words around them must.
TERMINAL = ("\x1b]8;;http://evil.example/osc\x1b\\click\x1b]8;;\x1b\\ here "
            "\x1b]0;window-title-payload\x07rank 3 "
            "\x1bPdcs-payload\x1b\\died \x9b31mred\x9b0m \x85end")


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_terminal_control_strings_are_dropped_with_their_payload(kind):
    with Receiver(kind) as rx:
        assert channel(kind, rx.url).deliver(body(evidence=[TERMINAL], summary="stall: " + TERMINAL)).ok
        rendered = json.dumps(rx.wait_for(1)[0].json, ensure_ascii=False)
        for bad in ("evil.example/osc", "window-title-payload", "dcs-payload", "\x9b", "\x85", "31m"):
            assert bad not in rendered, (kind, bad)
        assert "click here" in rendered and "rank 3 died" in rendered, (kind, rendered)


def test_an_unended_control_string_hides_nothing_and_stays_linear():
    from watchdog.alerting.words.text import clean
    assert clean("\x1b]8;;rank 3 died of OOM") == "8;;rank 3 died of OOM"
    hostile = ("\x1b]" + "a" * 5000) * 200 + "\x9b" * 100_000   # about 1 MB, every start fails late
    assert clean(hostile).count("a") == 5000 * 200


#: Captive portals' and proxies' pages as they open: a doctype, an XHTML prologue, a comment
#: first, a bare <head>, a UTF-8 byte order mark (each answered with 200).
PORTAL_PAGES = (
    "<!DOCTYPE html><html><body>Sign in to the proxy</body></html>",
    '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" '
    '"http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">\n<html xmlns="http://www.w3.org/1999/xhtml"><body>Login</body></html>',
    "<!-- portal v2 -->\n<html><body>Accept the terms</body></html>",
    "<head><title>Network login</title></head><body>...</body>",
    "\ufeff<html><body>Sign in</body></html>",
)


@pytest.mark.parametrize("kind", ["slack", "webhook", "alertmanager"])
def test_an_html_page_with_200_is_not_a_delivery_for_receivers_without_json_codes(kind):
    """Slack answers `ok`, a webhook or Alertmanager plain text or JSON; a captive portal's HTML
    page with 200 (a doctype, a prologue, a comment or a BOM before it) is retried, not counted as
    sent."""
    with Receiver(kind) as rx:
        rx.script(*[Answer(200, page) for page in PORTAL_PAGES])
        ch = channel(kind, rx.url)
        verdicts = [ch.deliver(body()) for _ in PORTAL_PAGES]
        assert all(not v.ok and v.retryable and "HTML page" in v.detail for v in verdicts), \
            [v.line() for v in verdicts]
        assert ch.deliver(body()).ok
        assert len(rx.requests) == len(PORTAL_PAGES) + 1 and len(rx.accepted()) == 1


@pytest.mark.parametrize("kind", ["slack", "webhook"])
def test_ok_served_as_text_html_is_a_delivery(kind):
    """Slack's incoming webhooks answer success as `ok` with `Content-Type: text/html`, and so does
    any receiver returning a bare string (Flask, Express): delivered at the first attempt. Before,
    the Content-Type alone made it "an HTML page" and the page was sent again at every retry
    until max_age."""
    with Receiver(kind) as rx:
        rx.script(Answer(200, "ok", headers={"Content-Type": "text/html; charset=utf-8"}))
        v = channel(kind, rx.url).deliver(body())
        assert v.ok, v.line()
        assert len(rx.requests) == 1


@pytest.mark.parametrize("kind", ["slack", "feishu", "dingtalk", "wecom"])
def test_a_redirect_from_a_chat_vendor_is_a_detour_and_retried(kind):
    """Chat vendors never redirect a webhook POST: a 302 is a captive portal or a login proxy in
    between, retried (until it goes away or max_age), not dropped as a wrong URL."""
    with Receiver(kind) as rx:
        rx.script(Answer(302, "", headers={"Location": "http://portal.example/login"}))
        ch = channel(kind, rx.url)
        first = ch.deliver(body())
        assert not first.ok and first.retryable and "captive portal" in first.detail, first.line()
        assert ch.deliver(body()).ok


def test_a_generic_webhooks_302_stays_a_permanent_answer():
    """A generic receiver's 302/303 usually means "done, see elsewhere" (post-redirect-get): not
    retried (it would deliver again at every attempt)."""
    with Receiver("webhook") as rx:
        rx.script(Answer(302, "", headers={"Location": "http://elsewhere.example/"}))
        v = channel("webhook", rx.url).deliver(body())
        assert not v.ok and not v.retryable, v.line()

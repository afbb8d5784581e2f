"""Messages as people read them: alerts collapse by rule, titles in words, the largest realistic
incident within every platform's documented limits (nothing dropped silently), times in the
configured zone, and the actions (runbook, silence) in every message.

Limits (see docs/alerting.md "Messages"): Feishu custom bot body 20 KB; Slack 50 blocks, 3000
characters per section, 150 per header, 40,000 for the top-level text, 10 context elements;
WeCom markdown 4096 bytes; DingTalk markdown 4000 bytes (no documented limit; a common client cap).
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.message_kit import (ALL_KINDS, CHAT_KINDS, MEGATRON_NAN, chat_text, check_limits, deliver, incident_64,
                               nan_on_8_ranks)
from watchdog.alerting.words.timetext import TimeText, ago
from watchdog.core.rulecatalog import catalog as rule_catalog
from watchdog.core.rulecatalog import names as rule_names
from watchdog.alerting.words.wording import compact, phrase, scope
from watchdog.parse.steps import find_step
from watchdog.config.load import load_config_text


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_the_64_rank_incident_fits_every_platform_with_every_rule_present(kind):
    body = incident_64()
    req = deliver(kind, body)
    check_limits(kind, req)
    if kind == "alertmanager":
        assert len(req.json) == len(body["alerts"])  # pushes are per alert: none may be lost
        return
    if kind == "webhook":
        shown = {a["labels"]["alertname"] for a in req.json["alerts"]}
        assert len(req.json["alerts"]) + req.json["truncatedAlerts"] == len(body["alerts"])
        assert req.json["truncatedAlerts"] == 0 or len(req.body) <= 256 * 1024
        assert shown, "the webhook keeps the most severe alerts"
        return
    text = chat_text(kind, req)
    for rule in rule_names():
        # shown as an entry (its runbook anchor) or named in the explicit "and N more" line
        assert f"#{rule}" in text or f"{rule} (" in text, (kind, rule)


@pytest.mark.parametrize("kind", CHAT_KINDS)
def test_a_nan_on_8_ranks_is_a_message_of_a_few_lines(kind):
    req = deliver(kind, nan_on_8_ranks(), max_log_lines=3)
    text = chat_text(kind, req)
    title = req.json.get("card", {}).get("header", {}).get("title", {}).get("content") or req.text
    assert "NaN loss at iteration 5426 on ranks 0-7" in title
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) <= 20, "\n".join(lines)
    assert text.count("bad batch") == 2  # the hint once per rule (two rules), not once per alert
    assert text.count("snapshots/") == 1  # the snapshot once per message
    assert "npu-watchdog silence add --match rule=log_nan --for 2h" in text
    assert "/runbook/en#log_nan" in req.text  # the daemon's own runbook by default


def test_display_time_zone_shows_the_offset_and_how_long_ago():
    ts = 1796040000.0  # 2026-11-30 12:00:00 UTC
    assert TimeText.named("Asia/Shanghai", now=ts + 180).since(ts) == "2026-11-30 20:00:00 +08:00 (3m ago)"
    assert TimeText.named("UTC", now=ts + 5).since(ts) == "2026-11-30 12:00:00 +00:00 (5s ago)"
    assert ago(3 * 3600 + 7 * 60 + 12) == "3h7m ago" and ago(0.2) == "just now"
    req = deliver("wecom", nan_on_8_ranks(), display_timezone="Asia/Shanghai")
    assert "+08:00 (3m ago)" in req.json["markdown"]["content"]


def test_a_bad_time_zone_is_a_clear_config_error():
    with pytest.raises(Exception) as exc:
        load_config_text(yaml.safe_dump({"alerting": {"display_timezone": "Mars/Olympus"}}))
    assert "Mars/Olympus" in str(exc.value) and "IANA" in str(exc.value)


def test_runbook_url_is_configurable_and_reaches_every_channel():
    url = "https://wiki.example/npu/runbook"
    for kind in ALL_KINDS:
        req = deliver(kind, nan_on_8_ranks(), runbook_url=url)
        assert f"{url}#log_nan" in req.text, kind
    with pytest.raises(Exception):
        load_config_text(yaml.safe_dump({"alerting": {"runbook_url": "javascript:alert(1)"}}))


def test_feishu_buttons_and_slack_context_line():
    fs = deliver("feishu", nan_on_8_ranks()).json
    buttons = [e for e in fs["card"]["body"]["elements"] if e["tag"] == "button"]
    assert [b["text"]["content"] for b in buttons] == ["Dashboard", "Runbook"]
    assert buttons[1]["behaviors"][0]["default_url"].endswith("/runbook/en#log_nan")
    sl = deliver("slack", nan_on_8_ranks()).json
    ctx = sl["blocks"][-1]
    assert ctx["type"] == "context"
    assert "Dashboard" in ctx["elements"][0]["text"] and "Runbook" not in json.dumps(ctx)


def test_a_one_rule_slack_message_links_its_runbook_once():
    body = nan_on_8_ranks()
    body["alerts"] = [a for a in body["alerts"] if a["rule"] == "log_nan"]
    sl = json.dumps(deliver("slack", body).json)
    assert sl.count("|Runbook>") == 1, sl
    assert sl.count("/runbook/en#log_nan") == 1


def test_webhook_and_alertmanager_carry_description_and_runbook_url():
    for kind in ("webhook", "alertmanager"):
        req = deliver(kind, nan_on_8_ranks())
        alerts = req.json["alerts"] if kind == "webhook" else req.json
        for a in alerts:
            assert a["annotations"]["runbook_url"].endswith("#" + a["labels"]["alertname"])
            assert a["annotations"]["description"]
        assert "iteration 5426" in json.dumps(alerts[0]["annotations"])


def test_wording_compact_sets_steps_and_scopes():
    assert compact(["3", "0", "1", "2", "7", "5"]) == "0-3, 5, 7"
    assert compact([str(i) for i in range(0, 40, 2)]).endswith("and 12 more")
    assert find_step([MEGATRON_NAN]) == ("iteration", 5426)
    assert find_step(["loss=nan global_step=77 lr=1e-4"]) == ("step", 77)
    assert find_step(["rank 3 stuck at step 12 for 5m"]) == ("step", 12)
    assert find_step(["no number here", "stepping"]) is None
    assert scope([{"rank": str(r)} for r in range(8)]) == "on ranks 0-7"
    assert scope([{"npu": "2", "chip": "0"}, {"npu": "5", "chip": "0"}]) == "on NPU 2, 5"
    assert scope([{"probe": "npu"}]) == "(probe npu)"
    assert find_step(["step" + " " * 100000 + "x", "iteration" * 20000]) is None  # bounded scans


def test_every_known_rule_has_words():
    """Every rule declares its English title, and a headline starts with it."""
    assert [n for n in rule_names() if not rule_catalog()[n].title] == []
    assert phrase("npu_missing") == "NPU card lost" and phrase("log_nan") == "NaN loss"
    assert phrase("some_newer_rule") == "Some newer rule"


def test_the_early_nan_hint_names_the_iteration_of_the_line():
    from dataclasses import replace

    from watchdog.detectors.logs import _hint
    from watchdog.probes.logs import ActiveMatch

    hit = ActiveMatch(rule="nan_loss", category="nan", severity="critical", role="root", title="NaN loss",
                      rank="0", source="train", path="train.log", first_at=1000.0 + 720, last_at=1000.0 + 720,
                      count=1, summary="loss is NaN/inf", evidence=(MEGATRON_NAN,),
                      hint="h", hint_early="NaN early: check the warm-up.", hint_late="NaN late.")
    assert _hint(hit, 1000.0, 3600) == "First seen at iteration 5426, 12 min after the ranks started. " \
                                       "NaN early: check the warm-up."
    no_step = replace(hit, evidence=("loss: nan",))
    assert _hint(no_step, 1000.0, 3600).startswith("First seen 12 min after")

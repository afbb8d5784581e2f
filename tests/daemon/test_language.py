"""Messages and the runbook in Chinese (`alerting.language: zh`, or per channel).

The words are data (watchdog/words/<lang>.yaml): every catalog rule has all of them in every
language; the Chinese runbook has a section per rule under the same anchor; one node writes
Chinese to one channel and English to another about the same incident; and the largest realistic
incident in Chinese stays within every platform's limits (bytes of UTF-8 where a platform counts
bytes) without a cut that splits a character.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.fakes.receivers import Receiver
from tests.helpers import REPO
from tests.message_kit import (ALL_KINDS, CJK, alert, chat_text, check_limits, deliver, english_left, incident_64,
                               nan_on_8_ranks, note)
from watchdog.core import rulecatalog
from watchdog.docsgen import runbooks
from watchdog.alerting.deliver.channels import build_channel
from watchdog.alerting.words.digest import runbook_link
from watchdog.alerting.words.render import Message, escape_plain
from watchdog.alerting.words.text import cut_bytes, cut_chars
from watchdog.config.load import load_config_text
from watchdog.words import LANGUAGES, RULE_FIELDS, SUMMARY_FIELDS, template_fields, words


# -- the words are data, complete for every rule ---------------------------------------------
@pytest.mark.parametrize("language", LANGUAGES)
def test_every_catalog_rule_has_every_word_in_every_language(language):
    missing = []
    for name in rulecatalog.names():
        rw = runbooks.rule_words(name, language)
        # English summaries and hints are the findings' own text (written where they are built).
        fields = RULE_FIELDS if language != "en" else ("title", "meaning", "first_check")
        missing += [f"{name}.{f}" for f in fields if not getattr(rw, f).strip()]
    assert not missing, f"{language}: rules without their words: {missing}"


def test_a_rule_without_chinese_words_is_caught(monkeypatch):
    """The completeness check above can fail: a rule the zh file does not know has no words."""
    zh = words("zh")
    monkeypatch.delitem(zh.rules, "stall")
    assert not runbooks.rule_words("stall", "zh").title


def test_chinese_words_are_chinese_and_templates_name_known_fields():
    zh = words("zh")
    assert set(zh.rules) <= set(rulecatalog.names()), "words for a rule the catalog does not have"
    for name, rw in zh.rules.items():
        for f in RULE_FIELDS:
            assert CJK.search(getattr(rw, f)), f"{name}.{f} is not Chinese: {getattr(rw, f)!r}"
        assert set(template_fields(rw.summary)) <= SUMMARY_FIELDS, (name, rw.summary)
    en = words("en")
    assert set(en.ui) <= set(zh.ui), f"shared texts without Chinese: {sorted(set(en.ui) - set(zh.ui))}"
    for key, text in en.ui.items():  # the same fields, or a translation would drop a number
        assert set(template_fields(zh.ui[key])) == set(template_fields(text)), key


# -- the runbook -----------------------------------------------------------------------------
def _sections(text: str) -> set:
    return {m.group(1) for m in re.finditer(r"(?m)^## ([a-z0-9_]+)\s*$", text)}


def _prometheus_alerts() -> dict:
    """alert name -> severity label, from the shipped Prometheus rules."""
    doc = yaml.safe_load((REPO / "contrib" / "prometheus" / "npu-watchdog.rules.yml").read_text())
    return {r["alert"]: r["labels"]["severity"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_the_chinese_runbook_has_every_rule_under_its_anchor_and_is_current():
    page = REPO / "watchdog" / "runbook" / "zh.md"
    text = page.read_text(encoding="utf-8")
    others = words("zh").alerts
    assert _sections(text) == set(rulecatalog.names()) | set(others)
    for name in list(rulecatalog.names()) + list(others):
        assert f'<a id="{name}"></a>' in text
        body = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert CJK.search(body), name
        if name in others:  # fleet alerts are silenced in Alertmanager, never on the node
            assert "rule=" not in body and (f"alertname={name}" in body) == (others[name].source == "prometheus")
        else:
            assert f"rule={name}" in body, name
    assert text == runbooks.render_runbook_in("zh"), "watchdog/runbook/zh.md is stale: run `make docs`"


def test_chinese_words_for_every_alert_outside_the_catalog_match_the_prometheus_rules():
    """`test_alert` and every fleet alert of the shipped Prometheus rules have Chinese runbook words,
    with the severity the rules file gives (and none for an alert the rules do not have)."""
    others = words("zh").alerts
    fleet = {n: a.severity for n, a in others.items() if a.source == "prometheus"}
    assert fleet == _prometheus_alerts()
    assert [n for n, a in others.items() if a.source == "cli"] == ["test_alert"]
    assert not set(others) & set(rulecatalog.names()), "a catalog rule's words belong under `rules`"
    for name, a in others.items():
        for f in ("title", "meaning", "first_check"):
            assert CJK.search(getattr(a, f)), f"{name}.{f} is not Chinese: {getattr(a, f)!r}"


def test_runbook_links_follow_the_message_language():
    """`{lang}` in the base becomes the message's language (the daemon's own base has it); a base
    without it is one page for every language."""
    assert runbook_link("https://n.example/runbook/{lang}", "stall", "zh") == "https://n.example/runbook/zh#stall"
    assert runbook_link("https://n.example/runbook/{lang}", "stall", "en") == "https://n.example/runbook/en#stall"
    assert runbook_link("https://w.example/ops/{lang}.md#x", "stall", "zh") == "https://w.example/ops/zh.md#stall"
    assert runbook_link("https://w.example/ops/page", "stall", "zh") == "https://w.example/ops/page#stall"


# -- config ----------------------------------------------------------------------------------
def test_language_defaults_to_english_and_a_channel_may_override_it():
    doc = {"alerting": {"language": "zh", "channels": [
        {"type": "feishu", "name": "cn", "url": "https://open.feishu.cn/x"},
        {"type": "slack", "name": "us", "url": "https://hooks.slack.com/x", "language": "en"}]}}
    cfg = load_config_text(yaml.safe_dump(doc))
    langs = [build_channel(c, cfg.alerting).words.language for c in cfg.alerting.channels]
    assert langs == ["zh", "en"]
    assert load_config_text("{}").alerting.language == "en"


def test_an_unknown_language_is_a_clear_config_error():
    with pytest.raises(Exception) as exc:
        load_config_text(yaml.safe_dump({"alerting": {"language": "fr"}}))
    assert "language" in str(exc.value) and "'en'" in str(exc.value) and "'zh'" in str(exc.value)


# -- messages --------------------------------------------------------------------------------
def test_one_incident_pages_a_chinese_feishu_group_and_an_english_slack_channel():
    with Receiver("feishu") as fs, Receiver("slack") as sl:
        doc = {"alerting": {"max_log_lines": 3, "runbook_url": "https://n.example/runbook/{lang}", "channels": [
            {"type": "feishu", "name": "cn", "url": fs.url, "language": "zh", "min_severity": "info"},
            {"type": "slack", "name": "us", "url": sl.url, "min_severity": "info"}]}}
        cfg = load_config_text(yaml.safe_dump(doc))
        body = nan_on_8_ranks()
        for c in cfg.alerting.channels:
            assert build_channel(c, cfg.alerting).deliver(body).ok
        [cn], [us] = fs.wait_for(1), sl.wait_for(1)
    card = cn.json["card"]
    title = card["header"]["title"]["content"]
    assert title.startswith("[严重] node-01/llama：loss 出现 NaN（迭代 5426），rank 0-7"), title
    buttons = [e for e in card["body"]["elements"] if e["tag"] == "button"]
    assert [b["text"]["content"] for b in buttons] == ["监控面板", "处置手册"]
    assert buttons[1]["behaviors"][0]["default_url"] == "https://n.example/runbook/zh#log_nan"
    text = chat_text("feishu", cn)
    assert "npu-watchdog silence add --match rule=log_nan --for 2h" in text  # commands unchanged
    assert "[rank0] iteration     5426/  100000 | consumed" in text  # log lines byte for byte, in a code block
    assert not english_left(text + "\n" + title, keep={"node", "llama", "nan_loss"}), english_left(text)

    blocks = us.json["blocks"]
    assert blocks[0]["text"]["text"].startswith("[CRITICAL] node-01/llama: NaN loss at iteration 5426 on ranks 0-7")
    context = [e["text"] for e in blocks[-1]["elements"]]
    assert context[0] == "<https://grafana.example/d/npu-watchdog/npu-watchdog?var-host=node-01|Dashboard>"
    assert "<https://n.example/runbook/en#log_nan|Runbook>" in chat_text("slack", us)
    assert not CJK.search(chat_text("slack", us).replace("训练日志", ""))


def test_the_slack_context_line_and_dingtalk_wecom_links_in_chinese():
    for kind in ("slack", "dingtalk", "wecom"):
        req = deliver(kind, nan_on_8_ranks(), language="zh", runbook_url="https://n.example/runbook/{lang}")
        if kind == "slack":
            context = [e["text"] for e in req.json["blocks"][-1]["elements"]]
            assert context[0] == "<https://grafana.example/d/npu-watchdog/npu-watchdog?var-host=node-01|监控面板>", context
            assert context[1].startswith("npu-watchdog · 告警 · 16 条告警，2 条规则，rank 0-7 · id "), context
            assert "<https://n.example/runbook/zh#log_nan|处置手册>" in chat_text(kind, req)
        else:
            text = chat_text(kind, req)
            assert "[监控面板](https://grafana.example/d/npu-watchdog/npu-watchdog?var-host=node-01) · " \
                   "[处置手册](https://n.example/runbook/zh#log_nan)" in text, text


def test_resolved_and_numbers_stay_exact_in_chinese():
    body = nan_on_8_ranks()
    for a in body["alerts"]:
        a["ends_at"] = a["since"] + 120
    body.update(kind="resolved", status="resolved")
    req = deliver("wecom", body, language="zh", display_timezone="Asia/Shanghai")
    text = req.json["markdown"]["content"]
    assert text.startswith("### [严重] 已恢复 node-01/llama：loss 出现 NaN（迭代 5426），rank 0-7")
    assert re.search(r"恢复于 \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+08:00（1 分钟前）", text), text
    assert text.count("已恢复") == 1, text  # the header says it; each rule's line says when


# -- limits ----------------------------------------------------------------------------------
#: A decomposed letter (base + combining breve) and an emoji joined by ZWJ: each is one character
#: on screen but two or three code points, so a careless cut splits it.
_CLUSTERS = ("и\u0306", "👩\u200d💻")


def _hostile_incident():
    """Every rule, 64 ranks and 16 NPUs, with log lines whose cut points fall inside characters."""
    body = incident_64()
    for i, a in enumerate(body["alerts"]):
        base = "训练" * (145 + i % 3)
        a["evidence"] = [base + _CLUSTERS[j % 2] * 40 for j in range(10)]
        a["summary"] = "摘要" * 200 + _CLUSTERS[i % 2] * 50
        a["labels"]["host"] = "节点" * 40 + "и\u0306" * 20
    return body


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_rule_in_chinese_on_64_ranks_fits_every_platform_and_no_cut_splits_a_character(kind):
    body = _hostile_incident()
    req = deliver(kind, body, language="zh")
    # A small message shows its log lines, each cut at the line limit inside a character.
    small = deliver(kind, note(_hostile_incident()["alerts"][:3]), language="zh")
    for r in (req, small):
        r.body.decode("utf-8", errors="strict")
        check_limits(kind, r)
    cut = [s for r in (req, small) for s in _strings(r.json) if "…" in s]
    assert cut, "the incident is large enough that something is cut"
    for s in cut:
        for m in re.finditer("…", s):
            before = s[:m.start()]
            assert not before.endswith(("и", "\u200d", "👩")), (kind, before[-12:])
        assert "\ufffd" not in s
    if kind in ("webhook", "alertmanager"):
        alerts = req.json if kind == "alertmanager" else req.json["alerts"]
        assert all(CJK.search(a["annotations"]["summary"]) for a in alerts)
        return
    text = chat_text(kind, req)
    assert "[严重]" in text or kind == "feishu"
    for rule in rulecatalog.names():
        assert f"#{rule}" in text or f"{rule}（" in text, (kind, rule)


def test_cuts_count_utf8_bytes_and_keep_characters_whole():
    text = "训" * 2000
    out = cut_bytes(text, 4096)
    assert len(out.encode("utf-8")) <= 4096 and out.endswith("…") and len(out) == (4096 - 3) // 3 + 1
    assert cut_bytes("abc", 10) == "abc"
    assert cut_chars("x" * 9 + "и\u0306" * 5, 11) == "x" * 9 + "…"
    assert cut_chars("ab👩\u200d💻cd", 4) == "ab…"
    assert cut_bytes("ab" + "и\u0306" * 3, 9) == "abи\u0306…" and cut_bytes("ab" + "и\u0306" * 3, 8) == "ab…"


#: Variants the Chinese text must not use: the glossary (docs/glossary.zh.md) fixes one term each.
_NOT_OUR_TERMS = {"集体通信": "集合通信", "操作符": "算子", "检查点": "checkpoint", "显卡": "NPU", "GPU": "NPU",
                  "心跳包": "心跳", "断点重训": "断点续训", "内存溢出": "显存不足（OOM）", "告警级别": "级别"}


def test_chinese_text_uses_the_glossary_terms_consistently():
    glossary = (REPO / "docs" / "glossary.zh.md").read_text(encoding="utf-8")
    sources = [(REPO / "watchdog" / "words" / "zh.yaml").read_text(encoding="utf-8"),
               (REPO / "watchdog" / "runbook" / "zh.md").read_text(encoding="utf-8")]
    for variant, ours in _NOT_OUR_TERMS.items():
        assert all(variant not in text for text in sources), f"use {ours!r}, not {variant!r}"
    for term in ("算子", "HBM 显存", "集合通信", "集合通信超时", "心跳", "断点续训", "健康状态", "掉卡"):
        assert term in glossary, term
        assert any(term in text for text in sources), f"glossary term {term!r} is used nowhere"


def test_a_fleet_incident_title_in_chinese():
    body = note([alert("log_oom", {"rank": "3", "node": "node-07"}, 1796040000.0)])
    body["incident"] = {"culprit_root": True, "nodes": 4, "ranks": 32, "symptoms": 12}
    title = Message(body).title(escape_plain, words("zh"))
    assert title == "[严重] llama：最先出现的故障 log_oom，位于 node-07 rank=3 | 涉及 4 个节点、32 个 rank，12 条症状告警"

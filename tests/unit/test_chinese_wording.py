"""Chinese messages and the Chinese runbook read as an Ascend ops engineer writes them: durations
and times in Chinese units ("13 秒前", "立即触发", never "13s前" or "`for` 0s"), and none of the
literal phrasings a native reader stumbled on."""

from __future__ import annotations

import re

import pytest

from watchdog.alerting.words.digest import since_text
from watchdog.alerting.words.timetext import TimeText
from watchdog.docsgen.runbooks import render_runbook_in
from watchdog.runbook import HERE
from watchdog.words import words

ZH = words("zh")
#: A number followed by an English time unit (`13s`, `1h5m`, `500ms`): not in Chinese text.
ENGLISH_UNIT = re.compile(r"(?<![0-9A-Za-z])(?:\d+(?:ms|[smhd]))+(?![0-9A-Za-z])")
NOW = 1_764_500_000.0


def prose(text: str) -> str:
    """The text without code (fenced blocks, `spans`): commands keep their own syntax (`--for 2h`)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


@pytest.mark.parametrize("seconds", [0.4, 1, 13, 59, 61, 125, 599, 600, 3725, 90061])
def test_how_long_ago_is_in_chinese_units(seconds):
    text = since_text(TimeText.named("Asia/Shanghai", now=NOW), NOW - seconds, ZH)
    assert not ENGLISH_UNIT.search(text), text
    assert re.search(r"（(刚刚|\d+ (天|小时|分钟|秒)( \d+ (小时|分钟|秒))*前)）$", text), text


def test_durations_in_chinese_and_english():
    assert ZH.duration(13) == "13 秒" and ZH.duration(3725) == "1 小时 2 分钟 5 秒" and ZH.duration(0) == "0 秒"
    assert words("en").duration(3725) == "1h2m5s" and words("en").duration(0.5) == "500ms"


def test_the_chinese_runbook_uses_no_english_units_and_says_when_a_rule_fires():
    page = render_runbook_in("zh")
    assert not ENGLISH_UNIT.search(prose(page)), ENGLISH_UNIT.findall(prose(page))
    assert "`for`" not in page
    assert "立即触发" in page and re.search(r"持续 30 秒后触发（`alerting\.for\.probe_down`）", page)


#: What a native reader flagged, and what replaced it.
FLAGGED = ("作业停止前进", "驱动丢失了它", "无法抓取", "运行手册", "已恢复，恢复时间", "make docs", "不要直接编辑")


def test_the_flagged_phrasings_are_gone():
    served = (HERE / "zh.md").read_text(encoding="utf-8")
    texts = {"generated runbook": render_runbook_in("zh"), "served runbook": served,
             "message words": "\n".join(f"{k}: {v}" for k, v in ZH.ui.items())
             + "\n".join(str(r) for r in ZH.rules.values()) + "\n".join(str(a) for a in ZH.alerts.values())}
    for where, text in texts.items():
        for bad in FLAGGED:
            assert bad not in text, (where, bad)
    assert served.startswith("# 处置手册\n")
    assert "作业停滞" in ZH.rule("stall").summary and "驱动已识别不到该卡" in ZH.rule("npu_missing").hint


def test_the_oom_title_and_summary_name_the_same_memory():
    oom = ZH.rule("log_oom")
    assert "显存" in oom.title and "显存" in oom.summary and "内存" not in oom.summary.replace("显存", "")


def test_the_served_chinese_page_has_a_chinese_title():
    from watchdog.runbook import page

    html = page("zh").decode("utf-8")
    assert "<title>npu-watchdog 处置手册</title>" in html and 'lang="zh"' in html


def test_a_duration_value_is_shown_in_the_message_language():
    from watchdog.alerting.words.digest import duration_seconds

    assert [duration_seconds(v) for v in ("8s", "1h5m", "250ms", "2d", "3 lines", "", None, "5")] == [
        8.0, 3900.0, 0.25, 172800.0, None, None, None, None]
    assert ZH.duration(duration_seconds("8s")) == "8 秒"

"""End-to-end: the demo with `alerting.language: zh` sends exactly the messages the English demo
sends (the same counts per step and channel), and every chat message is Chinese except for
labels, paths, commands and log excerpts."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tests.golden_kit import golden_diff, message_counts
from tests.message_kit import CJK, chat_text, english_left

pytestmark = pytest.mark.slow


def test_the_chinese_demo_pages_like_the_english_one_in_chinese(demo):
    run = demo(language="zh")
    results = {r.name.split(":")[0].split(" (")[0]: r for r in run.play()}
    assert all(r.ok for r in results.values()), [(r.name, r.messages, r.resolved, r.delivered_at, r.channels)
                                                 for r in results.values() if not r.ok]
    for benign in ("healthy training", "long checkpoint", "training resumes after the checkpoint"):
        assert results[benign].messages == 0, benign
    assert results["HCCL hang"].messages == 1 and results["recovery"].resolved == 1
    for name in ("NaN loss on every rank", "NPU out of memory on rank 3", "card lost"):
        assert results[name].channels == {"timeline": {"firing": 1, "resolved": 1},
                                          "oncall-slack": {"firing": 1, "resolved": 1}}, (name, results[name].channels)
    assert results["rank crash"].channels["oncall-slack"]["firing"] == 1
    counts = golden_diff("demo_messages.json", message_counts(results.values()))  # the English demo's
    assert not counts, counts

    slack = [r.body for r in run.receiver.received if r.path.startswith("/slack")]
    assert len(slack) >= 9  # five faults, four resolves
    for body in slack:
        text = chat_text("slack", SimpleNamespace(json=body))
        title = body["blocks"][0]["text"]["text"]
        assert title.startswith(("[严重]", "[警告]")), title
        assert not english_left(text), (english_left(text), text)
        # Durations and times in Chinese units ("13 秒前"), outside commands and log lines.
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))
        assert not re.search(r"(?<![0-9A-Za-z])(?:\d+(?:ms|[smhd]))+(?![0-9A-Za-z])", prose), text
        assert "已恢复，恢复时间" not in text and "作业停止前进" not in text and "运行手册" not in text, text
    hooks = [r.body for r in run.receiver.received if r.path.startswith("/hook")]
    assert hooks and all(CJK.search(a["annotations"]["summary"]) for h in hooks for a in h["alerts"])

"""The demo prints messages as plain text: no raw Slack markup reaches the terminal."""

from __future__ import annotations

from watchdog.demo.receiver import plain_lines, strip_mrkdwn


def test_strip_mrkdwn_turns_markup_into_plain_text():
    assert strip_mrkdwn("*CRITICAL loss_nan* rank=0 _in italics_ a_b_c") == "CRITICAL loss_nan rank=0 in italics a_b_c"
    text = "*CRITICAL* stall on <https://g/d?a=1&amp;b=2|dashboard> _since_ `12:00` &lt;x&gt; <!here> file_name_x"
    assert strip_mrkdwn(text) == "CRITICAL stall on dashboard (https://g/d?a=1&b=2) since 12:00 <x> @here file_name_x"


def test_strip_mrkdwn_leaves_unpaired_marks_and_is_bounded():
    assert strip_mrkdwn("rank_0 * 3 and 2*x") == "rank_0 * 3 and 2*x"
    long = "*" + "a" * 100000
    assert strip_mrkdwn(long) == long


def test_plain_lines_of_a_block_kit_message():
    body = {"blocks": [
        {"type": "header", "text": {"type": "plain_text", "text": "[CRITICAL] stall on node-01"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "*What:* every rank blocks\n*Since:* `12:00`"}},
        {"type": "divider"},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "<https://d|dashboard>"}]},
    ]}
    lines = plain_lines(body)
    assert lines[0] == "[CRITICAL] stall on node-01" and set(lines[1]) == {"="}
    assert "*" not in "".join(lines) and "`" not in "".join(lines)
    assert lines[-1] == "dashboard (https://d)"


def test_links_and_commands_are_not_broken_across_lines():
    url = "https://npu-watchdog.example/docs/runbook.md#log_nan"
    text = f"<{url}|Runbook> · silence: `npu-watchdog silence add --match rule=log_nan --for 2h`"
    body = {"blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}
    joined = " ".join(ln.strip() for ln in plain_lines(body, width=40))
    assert url in joined and "npu-watchdog silence add" in joined


def test_the_demo_prints_channel_counts_as_words_and_step_names_whole():
    import time

    from watchdog.demo.scenario import StepResult, channel_text, summary_table

    text = channel_text({"timeline": {"firing": 1, "resolved": 1}, "oncall-slack": {"firing": 1, "resolved": 0}})
    assert text == "oncall-slack 1 firing + 0 resolved, timeline 1 firing + 1 resolved"
    assert "{" not in text and "'" not in text
    name = "NPU out of memory on rank 3 (peers then time out in HCCL)"
    assert len(name) > 48
    now = time.time()
    table = summary_table([StepResult(name, "log_oom", now, now + 1, now + 2, messages=1)])
    assert name in table

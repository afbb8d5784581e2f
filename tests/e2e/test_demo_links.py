"""End-to-end: what the demo's on-call person reads is right and every link in it works.

The standard demo sequence against the real daemon; then every link of every message it sent
(Slack and the webhook copy, firing and resolved) is followed: it must answer 200 with its anchor
on the page, served by the node itself (no network beyond it). The NaN message names the first
NaN iteration the ranks logged, not a later one.
"""

from __future__ import annotations

import re
import urllib.parse

import pytest

from tests.helpers import check_link, message_links

pytestmark = pytest.mark.slow


def _first_nan_iteration(run) -> int:
    firsts = []
    for log in sorted((run.node.root / "logs").glob("rank*.log")):
        m = re.search(r"loss is nan at iteration (\d+)", log.read_text(errors="replace"))
        if m:
            firsts.append(int(m.group(1)))
    assert firsts, "no rank logged a NaN"
    return min(firsts)


def test_every_link_of_every_demo_message_answers_with_its_anchor_and_nan_names_the_first_iteration(demo):
    run = demo()
    results = {r.name.split(":")[0].split(" (")[0]: r for r in run.play()}
    bodies = [r.body for r in run.receiver.received]
    assert len(bodies) >= 8, len(bodies)
    links = [u for b in bodies for u in message_links(b)]
    assert links, "the demo's messages carry no link at all"
    hosts = {urllib.parse.urlsplit(u).hostname for u in links}
    assert hosts == {"127.0.0.1"}, f"links leave the node: {sorted(hosts)}"
    rules = {r for b in bodies for r in re.findall(r"/runbook/en#([a-z_]+)", str(b))}
    assert {"stall", "log_oom", "npu_missing", "rank_missing"} <= rules, rules
    assert [check_link(u) for u in links] == [None] * len(links)

    nan = results["NaN loss on every rank"]
    first = _first_nan_iteration(run)
    titles = [r.body["blocks"][0]["text"]["text"] for r in run.receiver.slack_since(nan.injected_at)
              if "NaN loss" in r.body["blocks"][0]["text"]["text"]]
    assert titles and all(f"iteration {first} " in t for t in titles), (first, titles)

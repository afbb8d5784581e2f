"""The decide stage of alerting/ stays pure: it imports no store, renderer, channel or sender, and
it never asks which vendor a channel is (a channel declares what it wants: `repush_every`, and
its config model's `fleet_sink`). Each check is also shown to fail on a planted line."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

ALERTING = Path(__file__).resolve().parents[2] / "watchdog" / "alerting"

#: The modules that decide (findings and a time in, notifications and outbox rows out).
DECIDE = tuple(sorted(p.stem for p in (ALERTING / "decide").glob("*.py") if p.stem != "__init__"))
VENDORS = ("feishu", "slack", "dingtalk", "wecom", "webhook", "alertmanager")


def imports_outside_decide(source: str) -> List[str]:
    """Every alerting module `source` imports (anywhere in it) that is not of the decide stage."""
    out = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names
                                     if node.module in ("watchdog.alerting", "watchdog.alerting.decide")]
        out += [n for n in names if n.startswith("watchdog.alerting")
                and n not in ("watchdog.alerting", "watchdog.alerting.decide")
                and not n.startswith("watchdog.alerting.decide.")]
    return out


def vendor_literals(source: str) -> List[str]:
    """String constants that name a vendor (`ch.type == "alertmanager"`): docstrings aside."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs and any(v in n.value.lower() for v in VENDORS)]


def test_the_decide_stage_imports_no_store_renderer_or_channel():
    assert {"core", "lifecycle", "muting", "notification", "routing"} <= set(DECIDE)
    found = {m: imports_outside_decide((ALERTING / "decide" / f"{m}.py").read_text(encoding="utf-8")) for m in DECIDE}
    assert {m: v for m, v in found.items() if v} == {}


def test_the_decide_and_words_stages_name_no_vendor():
    """Not even in a comment: a vendor's dialect (Slack's mrkdwn) lives in its channel module."""
    paths = sorted((ALERTING / "decide").glob("*.py")) + sorted((ALERTING / "words").glob("*.py"))
    assert len(paths) >= 14
    for p in paths:
        text = p.read_text(encoding="utf-8").lower()
        assert not [v for v in VENDORS + ("lark",) if v in text], p.name


def test_no_vendor_name_is_checked_outside_the_channels():
    found = {str(p.relative_to(ALERTING)): vendor_literals(p.read_text(encoding="utf-8")) for p in ALERTING.rglob("*.py")
             if "channels" not in p.parts}
    assert len(found) > 20
    assert {m: v for m, v in found.items() if v} == {}


def test_the_checks_see_a_planted_store_import_and_vendor_check():
    planted = ("from watchdog.alerting.deliver.store import AlertRow\n"
               "def f(ch):\n    from watchdog.alerting import render\n    return ch.type == 'alertmanager'\n")
    assert imports_outside_decide(planted) == ["watchdog.alerting.deliver.store", "watchdog.alerting.render"]
    assert vendor_literals(planted) == ["alertmanager"]
    assert imports_outside_decide("from watchdog.alerting.decide.records import AlertRow\n"
                                  "from watchdog.alerting.decide import lifecycle\n") == []

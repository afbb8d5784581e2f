"""Generated blocks in docs/: the metric table, the rule table and the config reference; and
generated pages: docs/runbook.md (from the runbook the daemon serves, watchdog/runbook/en.md).

Each block sits between `<!-- NAME:start -->` and `<!-- NAME:end -->` in its page. `make docs`
(`python -m watchdog.docsgen`) rewrites them from the code; a test fails when one is stale, so the
reference can never drift from what the daemon does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple
from watchdog.alerting.deliver.channels import build_channel
from watchdog.alerting.words.render import Message
from watchdog.config.load import load_config_text
from watchdog.config.reference import render_reference
from watchdog.docsgen.rules_table import render_rule_table
from watchdog.docsgen.runbooks import render_runbook_in
from watchdog.metrics.catalog import all_metrics, render_table
from watchdog.plugins_list import assemble
from watchdog.runbook import docs_page
from watchdog.words import LANGUAGES

REPO = Path(__file__).resolve().parent.parent.parent

assemble()  # the generated tables list what the composition root hands down


def _metric_table() -> str:
    return render_table(all_metrics())


def _config_reference() -> str:
    return render_reference()


def _rule_table() -> str:
    return render_rule_table()


#: The example incident of docs/alerting.md: a NaN seen on 8 ranks by the log and the heartbeat.
_EXAMPLE_NOW = 1796041380.0  # 2026-11-30 20:23:00 +08:00
_EXAMPLE_LINE = ("iteration 5426/100000 | consumed samples: 694528 | lm loss: nan | loss scale: 1.0 | "
                 "grad norm: nan |")


def _example_notification() -> Dict[str, Any]:
    since = _EXAMPLE_NOW - 180
    alerts = []
    for rule, summary in (("log_nan", f"NaN loss (rank {{r}}): {_EXAMPLE_LINE}"),
                          ("loss_nan", "rank {r} loss not finite at step 5426 (heartbeat)")):
        for r in range(8):
            alerts.append({
                "fp": f"{rule}-{r}", "rule": rule, "severity": "critical", "status": "firing",
                "summary": summary.format(r=r), "value": "loss" if rule == "loss_nan" else None,
                "labels": {"host": "node-3", "training_job": "llama-pretrain", "rank": str(r),
                           **({"log_rule": "nan_loss"} if rule == "log_nan" else {})},
                "hint": "Training diverged. Stop and resume from the last good checkpoint with a lower "
                        "learning rate or bf16; check the data around this step.",
                "since": since, "starts_at": since + 3, "ends_at": None,
                "evidence": [f"[rank{r}] {_EXAMPLE_LINE}"] * 2 if rule == "log_nan" else [],
                "snapshot": "/var/lib/npu-watchdog/snapshots/20261130T124000Z-node-3-log_nan.tar.gz",
                "dashboard": "https://grafana.example/d/npu-watchdog/npu-watchdog?var-host=node-3"})
    return {"kind": "firing", "status": "firing", "ikey": "3f2a9c41d07be85a6c12", "created": _EXAMPLE_NOW,
            "group": {"host": "node-3", "training_job": "llama-pretrain"}, "alerts": alerts}


def _card_text(card: Dict[str, Any]) -> str:
    """A Feishu card as its reader sees it: header, each markdown element, rules, buttons."""
    lines = [f"[header, {card['header']['template']}] {card['header']['title']['content']}"]
    for e in card["body"]["elements"]:
        if e["tag"] == "markdown":
            lines.append(e["content"])
        elif e["tag"] == "hr":
            lines.append("----")
        elif e["tag"] == "button":
            lines.append(f"[button] {e['text']['content']} -> {e['behaviors'][0]['default_url']}")
    return "\n".join(lines)


def _slack_text(blocks: List[Dict[str, Any]]) -> str:
    """A Slack message's blocks as sent: the header, each section's mrkdwn, the context line."""
    lines = []
    for b in blocks:
        if b["type"] == "header":
            lines.append(f"[header] {b['text']['text']}")
        elif b["type"] == "section":
            lines.append(b["text"]["text"])
        elif b["type"] == "context":
            lines.append("[context] " + " | ".join(e["text"] for e in b["elements"]))
    return "\n".join(lines)


def _message_examples() -> str:
    """One Feishu card and one Slack message per language, rendered by the channels themselves."""
    import yaml

    out = []
    for lang in LANGUAGES:
        doc = {"alerting": {"language": lang, "max_log_lines": 2, "display_timezone": "Asia/Shanghai",
                            "runbook_url": "https://wiki.example/npu-watchdog/runbook", "channels": [
                                {"type": "feishu", "name": "feishu-ops", "url": "https://feishu.example/hook"},
                                {"type": "slack", "name": "oncall", "url": "https://slack.example/hook"}]}}
        cfg = load_config_text(yaml.safe_dump(doc))
        feishu, slack = (build_channel(c, cfg.alerting) for c in cfg.alerting.channels)
        feishu.now = slack.now = _EXAMPLE_NOW
        card = feishu.payload(Message(_example_notification()))["card"]
        blocks = slack.payload(Message(_example_notification()))["blocks"]
        out.append(f"`language: {lang}`, Feishu card (elements in order, lark_md as sent):\n\n~~~~text\n"
                   + _card_text(card) + "\n~~~~\n")
        out.append(f"`language: {lang}`, Slack message (blocks in order, mrkdwn as sent):\n\n~~~~text\n"
                   + _slack_text(blocks) + "\n~~~~\n")
    return "\n".join(out).rstrip("\n")


#: (page, block name) -> the function that renders the block.
BLOCKS: Dict[Tuple[str, str], Callable[[], str]] = {
    ("docs/metrics.md", "metric-table"): _metric_table,
    ("docs/configuration.md", "config-reference"): _config_reference,
    ("docs/detection.md", "rule-table"): _rule_table,
    ("docs/alerting.md", "message-examples"): _message_examples,
}


def _runbook(language: str) -> Callable[[], str]:
    def render() -> str:
        return render_runbook_in(language)

    return render


#: Whole files generated from the code: page -> the function that renders it. The runbook of
#: each language other than English is package data the daemon serves; its words live in
#: watchdog/words/<lang>.yaml.
def _runbook_page() -> str:
    return docs_page()


#: Pages generated whole: page -> the function that renders it.
PAGES: Dict[str, Callable[[], str]] = {
    "docs/runbook.md": _runbook_page,
    "watchdog/runbook/zh.md": _runbook("zh"),
}


def _replace(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        raise ValueError(f"markers {start} / {end} are missing")
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{body}\n{end}{tail}"


def stale(root: Path = REPO) -> List[str]:
    """Blocks whose text differs from what the code renders now, as `page#block`."""
    out = []
    for (page, name), render in BLOCKS.items():
        text = (root / page).read_text(encoding="utf-8")
        if _replace(text, name, render()) != text:
            out.append(f"{page}#{name}")
    for page, render in PAGES.items():
        path = root / page
        if not path.exists() or path.read_text(encoding="utf-8") != render():
            out.append(page)
    return out


def update(root: Path = REPO) -> List[str]:
    """Rewrite every stale block; returns what changed."""
    changed = []
    for (page, name), render in BLOCKS.items():
        path = root / page
        text = path.read_text(encoding="utf-8")
        new = _replace(text, name, render())
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(f"{page}#{name}")
    for page, render in PAGES.items():
        path = root / page
        text = render()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(page)
    return changed


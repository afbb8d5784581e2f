"""The rule table of docs/detection.md: every rule the detectors emit, its default `for`, and the
default inhibitions it takes part in, rendered from the code's own lists."""

from __future__ import annotations

from typing import Dict, List, Set


def _inhibitions() -> Dict[str, Dict[str, Set[str]]]:
    from watchdog.config.sections.alerting import AlertingConfig

    rel: Dict[str, Dict[str, Set[str]]] = {}
    for rule in AlertingConfig().inhibitions:
        for src in rule.source:
            rel.setdefault(src, {"inhibits": set(), "by": set()})["inhibits"].update(rule.target)
        for dst in rule.target:
            rel.setdefault(dst, {"inhibits": set(), "by": set()})["by"].update(rule.source)
    return rel


def _names(items: Set[str]) -> str:
    return ", ".join(f"`{x}`" for x in sorted(items)) or "-"


def render_rule_table() -> str:
    from watchdog.rulecatalog import names as rule_names
    from watchdog.config.sections.alerting import AlertingConfig
    from watchdog.config.types import format_duration

    alerting = AlertingConfig()
    rel = _inhibitions()
    rows: List[str] = ["| rule | default `for` | inhibits | inhibited by | runbook |", "|---|---|---|---|---|"]
    for rule in rule_names():
        r = rel.get(rule, {"inhibits": set(), "by": set()})
        rows.append(f"| `{rule}` | {format_duration(alerting.for_rule(rule))} | {_names(r['inhibits'])} | "
                    f"{_names(r['by'])} | [{rule}](runbook.md#{rule}) |")
    return "\n".join(rows)

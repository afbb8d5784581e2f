"""The rule table of docs/detection.md: every rule in the rule catalog (severity, default `for`,
the default inhibitions it takes part in, runbook link), rendered from the catalog itself."""

from __future__ import annotations

from watchdog.core.rulecatalog import render_markdown


def render_rule_table() -> str:
    return render_markdown().rstrip("\n")

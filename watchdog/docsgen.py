"""Generated blocks in docs/: the metric table, the rule table and the config reference.

Each block sits between `<!-- NAME:start -->` and `<!-- NAME:end -->` in its page. `make docs`
(`python -m watchdog.docsgen`) rewrites them from the code; a test fails when one is stale, so the
reference can never drift from what the daemon does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent


def _metric_table() -> str:
    from watchdog.metrics.catalog import all_metrics, render_table

    return render_table(all_metrics())


def _config_reference() -> str:
    from watchdog.config.reference import render_reference

    return render_reference()


def _rule_table() -> str:
    from watchdog.rules_table import render_rule_table

    return render_rule_table()


#: (page, block name) -> the function that renders the block.
BLOCKS: Dict[Tuple[str, str], Callable[[], str]] = {
    ("docs/metrics.md", "metric-table"): _metric_table,
    ("docs/configuration.md", "config-reference"): _config_reference,
    ("docs/detection.md", "rule-table"): _rule_table,
}


def _runbook(language: str) -> Callable[[], str]:
    def render() -> str:
        from watchdog.rulecatalog import render_runbook_in

        return render_runbook_in(language)

    return render


#: Whole files generated from the code: page -> the function that renders it. The runbook of
#: each language other than English is package data the daemon serves; its words live in
#: watchdog/words/<lang>.yaml.
FILES: Dict[str, Callable[[], str]] = {
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
    for page, render in FILES.items():
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
    for page, render in FILES.items():
        path = root / page
        text = render()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    changed = update()
    print("updated: " + ", ".join(changed) if changed else "all generated blocks are current")
    sys.exit(0)

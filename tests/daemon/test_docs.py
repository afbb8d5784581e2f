"""Generated tables in docs/ are the code's tables; the README names the two commands CI relies on."""

from __future__ import annotations

from tests.helpers import REPO
from watchdog.metrics.catalog import all_metrics, render_table


def test_metric_table_is_current():
    page = (REPO / "docs" / "metrics.md").read_text()
    assert render_table(all_metrics()) in page, "run `make docs` to refresh docs/metrics.md"


def test_readme_names_the_two_commands_and_ci_calls_the_test_one():
    readme = (REPO / "README.md").read_text()
    assert "| run the tests | `make test` |" in readme
    assert "| run the main job (the daemon on a simulated 8-NPU node) | `make demo` |" in readme
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_generated_doc_blocks_are_current():
    from watchdog.docsgen import stale

    assert stale() == [], "run `make docs` to refresh the generated blocks"


def test_rule_table_lists_every_rule_with_a_runbook_section():
    from tests.doclinks import anchors
    from watchdog.core.rulecatalog import names

    runbook = anchors(REPO / "docs" / "runbook.md")
    missing = [r for r in names() if r not in runbook]
    assert not missing, f"docs/runbook.md has no section for: {missing}"


def test_readme_smallest_config_is_valid(monkeypatch):
    import re

    from watchdog.config.load import load_config_text

    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert len(blocks) == 1
    monkeypatch.setenv("FEISHU_WEBHOOK", "https://open.feishu.cn/open-apis/bot/v2/hook/x")
    monkeypatch.setenv("FEISHU_SECRET", "s")
    cfg = load_config_text(blocks[0])
    assert cfg.probes.logs.enabled and cfg.alerting.channels[0].type == "feishu"


def test_readme_command_table_lists_every_command():
    import re

    from watchdog.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    table = re.findall(r"^\| `npu-watchdog ([a-z-]+)", (REPO / "README.md").read_text(), re.M)
    missing = sorted(set(sub.choices) - set(table))
    assert not missing, f"README's command table leaves out: {missing}"
    assert {"discover", "completion"} <= set(table)


def test_probe_help_says_it_reads_no_existing_log_lines():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "watchdog", "probe", "--help"], capture_output=True, text=True,
                         cwd=str(REPO), timeout=60).stdout
    text = " ".join(out.split())
    assert "lines already in a file are NOT read" in text and "scan FILE..." in text


def test_every_config_key_has_a_description():
    from watchdog.config.reference import _walk
    from watchdog.config.schema import Config

    rows = list(_walk(Config, ""))
    assert len(rows) > 200
    missing = [path for path, _kind, _default, doc in rows if not doc.strip()]
    assert not missing, f"config keys without a `#:` description ({len(missing)}): {missing}"

"""The README's metric table is the code's table; the README names the two commands CI relies on."""

from __future__ import annotations

from tests.helpers import REPO
from watchdog.metrics.catalog import all_metrics, render_table


def test_readme_metric_table_is_current():
    readme = (REPO / "README.md").read_text()
    assert render_table(all_metrics()) in readme, "run `make docs` to refresh the README's metric table"


def test_readme_names_the_two_commands_and_ci_calls_the_test_one():
    readme = (REPO / "README.md").read_text()
    assert "| run the tests | `make test` |" in readme
    assert "make test" in (REPO / ".ci" / "run").read_text()

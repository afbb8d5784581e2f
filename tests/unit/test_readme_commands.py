"""Every command line in the README's command table parses as written (`completion` once needed
an argument the table did not show): placeholders in capitals stand for a value."""

from __future__ import annotations

import re

import pytest

from tests.helpers import REPO
from watchdog.cli import build_parser

ROW = re.compile(r"^\| `npu-watchdog ([^`]+)` \|", re.M)
ROWS = ROW.findall((REPO / "README.md").read_text(encoding="utf-8"))


def _argv(cell: str) -> list:
    words = []
    for w in cell.split():
        if "/" in w and not w.startswith("-"):  # `silence add/list/remove`: the first of them
            w = w.split("/")[0]
        words.append("x.yaml" if w == "FILE" else "x.log" if w == "FILE..." else w)
    return words


def test_the_table_is_there():
    assert len(ROWS) >= 12 and any(r.startswith("completion") for r in ROWS), ROWS


@pytest.mark.parametrize("cell", ROWS)
def test_a_readme_command_parses(cell):
    argv = _argv(cell)
    if argv[:2] == ["silence", "add"]:
        argv += ["--match", "rule=stall", "--for", "1h"]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's way of refusing
        raise AssertionError(f"`npu-watchdog {cell}` does not parse ({argv})") from exc


def test_completion_needs_no_argument():
    assert build_parser().parse_args(["completion"]).shell == "bash"

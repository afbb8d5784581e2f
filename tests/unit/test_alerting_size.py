"""No class over 250 lines and no function over 60 lines in watchdog/alerting/ (issue 26).

Why a test: the engine grew to 344 lines and 23 methods one feature at a time, each step small.
A limit checked at every run says so at the step that crosses it. Lines are counted from the
`class`/`def` line to the last line of its body (decorators not included), by the AST.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List, Tuple

import watchdog.alerting

ROOT = Path(watchdog.alerting.__file__).resolve().parent
MAX_CLASS = 250
MAX_FUNCTION = 60


def oversized(root: Path) -> List[Tuple[str, str, int]]:
    """(file:line, kind and name, lines) of every class or function over its limit under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                limit = MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION
                if lines > limit:
                    kind = "class" if isinstance(node, ast.ClassDef) else "def"
                    found.append((f"{path.relative_to(root.parent.parent)}:{node.lineno}", f"{kind} {node.name}", lines))
    return found


def test_no_class_or_function_in_alerting_is_over_its_limit():
    assert oversized(ROOT) == []


def test_the_count_sees_what_it_forbids(tmp_path):
    pkg = tmp_path / "watchdog" / "alerting"
    pkg.mkdir(parents=True)
    body = "\n".join(f"        x = {i}" for i in range(MAX_FUNCTION))
    (pkg / "big.py").write_text(f"class Small:\n    def long(self):\n{body}\n")
    assert [what for _, what, _ in oversized(pkg)] == ["def long"]
    methods = "\n".join(f"    def m{i}(self):\n        return {i}\n" for i in range(MAX_CLASS // 3 + 1))
    (pkg / "big.py").write_text(f"class Big:\n{methods}")
    assert [(what, n > MAX_CLASS) for _, what, n in oversized(pkg)] == [("class Big", True)]

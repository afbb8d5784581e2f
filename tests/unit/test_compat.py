"""Every module under watchdog/ and contrib/ parses as Python 3.7 syntax (the oldest we support).

This checks syntax only, on whatever interpreter runs the suite: `ast.parse(..., feature_version=
(3, 7))` rejects newer grammar such as `match`, positional-only `/` or the walrus, so CI on 3.11 still
catches it. CPython's check is best-effort (a 3.11 `a[*b]` subscript slips through). It does not
catch newer library calls (`zip(strict=)`, `importlib.resources.files`, ...) nor `X | Y`
annotations that pydantic or `get_type_hints` evaluate at run time; the interpreter matrix
(tests/pythons) runs the installed daemon on every version for that.
"""

from __future__ import annotations

import ast

import pytest

from tests.helpers import REPO

OLDEST = (3, 7)
SOURCES = sorted(
    p for top in ("watchdog", "contrib") for p in (REPO / top).rglob("*.py")
    # `build/` (ignored by git) holds copies a wheel build left behind: the same code twice, and
    # only after a first run, so the count of tests would depend on what ran before.
    if "__pycache__" not in p.parts and "build" not in p.parts
)


def test_there_are_sources_to_check():
    assert any(p.name == "cli.py" for p in SOURCES)


def test_the_check_rejects_newer_syntax():
    # feature_version is best-effort; make sure it is honoured for the grammar we care about.
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=OLDEST)
    with pytest.raises(SyntaxError):
        ast.parse("def t(self, name, /, **fields):\n    pass\n", feature_version=OLDEST)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_parses_as_oldest_supported_python(path):
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=OLDEST)

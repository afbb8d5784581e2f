"""The repository is self-contained: nothing the tests, benchmarks, package or Makefile read lives
outside the repository root (a user's clone has no sibling folders). Each finding names file and line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, Tuple

from tests.helpers import REPO

SCANNED = ("tests", "bench", "watchdog", "scripts", "contrib", "systemd", "config", ".ci", "Makefile")
CODE_SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".toml", ".cfg", ".ini", ".j2", ".service", ""}
# Text that names a place beside the repository: a sibling `shared` folder, the repository's parent.
OUTSIDE = re.compile(
    r"""\.\./+shared\b|(?<![\w/])shared/fixtures\b|REPO(?:_ROOT)?\s*\.\s*parent\b|\.parent\s*/\s*['"]shared['"]"""
    r"""|['"]\.\./\.\./\.\.""")
# A relative path literal climbing out of its own folder: resolved from the file that holds it.
RELATIVE = re.compile(r"""['"](\.\./[^'"\s]*)['"]""")
THIS = Path(__file__).resolve()


def _files(repo: Path) -> Iterator[Path]:
    for name in SCANNED:
        root = repo / name
        paths = [root] if root.is_file() else sorted(root.rglob("*")) if root.is_dir() else []
        for p in paths:
            if p.is_file() and p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts \
                    and "samples" not in p.parts and "fixtures" not in p.parts and p.resolve() != THIS:
                yield p


def _escapes(path: Path, literal: str, repo: Path) -> bool:
    target = (path.parent / literal).resolve()
    return repo.resolve() not in (target, *target.parents)


def outside_references(repo: Path = REPO) -> List[Tuple[str, int, str]]:
    found = []
    for path in _files(repo):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        for no, line in enumerate(lines, 1):
            if OUTSIDE.search(line) or any(_escapes(path, m.group(1), repo) for m in RELATIVE.finditer(line)):
                found.append((str(path.relative_to(repo)), no, line.strip()))
    return found


def test_nothing_refers_outside_the_repository():
    found = outside_references()
    assert not found, "paths outside the repository:\n" + "\n".join(f"{f}:{n}: {t}" for f, n, t in found)


def test_the_scan_sees_such_a_reference(tmp_path):
    """The checker itself can fail: a planted reference is reported with its file and line. It is
    planted in a tree of its own: planted in this one, the scan of the whole repository running
    beside it in another worker found it."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "clean.py").write_text('X = open("fixtures/a.log")\n')
    planted = tmp_path / "tests" / "_planted_outside_ref.py"
    planted.write_text('X = 1\nFIX = REPO.parent / "shared" / "fixtures"\nY = open("../../../etc/x")\n')
    found = [(f, n) for f, n, _ in outside_references(tmp_path)]
    assert found == [("tests/_planted_outside_ref.py", 2), ("tests/_planted_outside_ref.py", 3)]


def test_every_fixture_folder_states_its_sources():
    folders = [p for p in (REPO / "tests" / "fixtures").iterdir() if p.is_dir()]
    assert folders, "tests/fixtures has no fixture folders"
    for folder in folders:
        sources = folder / "SOURCES.md"
        assert sources.is_file(), f"{folder.relative_to(REPO)} has no SOURCES.md"
        text = sources.read_text(encoding="utf-8")
        missing = [p.name for p in folder.iterdir() if p.is_file() and p.name != "SOURCES.md" and p.name not in text]
        assert not missing, f"{sources.relative_to(REPO)} does not name: {missing}"

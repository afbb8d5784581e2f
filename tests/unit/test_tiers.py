"""The test tiers hold: every test file sits in a tier folder, no test module imports another, and
unit tests touch nothing real (no subprocess, sleep, socket, HTTP or daemon). A failure says where
a file should go (the rules are in tests/tierkit.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.tierkit import (PLACEMENT, TESTS, TIERS, all_test_files, imported_test_modules, real_uses,
                           suggested_tier, tier_of, unit_violations)


def test_every_test_file_lives_in_a_tier_folder():
    misplaced = [f"  git mv tests/{p.relative_to(TESTS)} tests/{suggested_tier(p)}/{p.name}"
                 for p in all_test_files() if tier_of(p) not in TIERS]
    assert not misplaced, ("test files outside a tier folder; move them (by what they touch):\n"
                           + "\n".join(misplaced) + "\n" + PLACEMENT)


def test_no_test_module_imports_another():
    bad = [f"  tests/{p.relative_to(TESTS)} imports {', '.join(mods)}"
           for p in all_test_files() for mods in [imported_test_modules(ast.parse(p.read_text(encoding="utf-8")))] if mods]
    assert not bad, ("test modules import other test modules; move the shared pieces into a kit module at "
                     "tests/ root (tests/helpers.py, tests/synth.py, tests/alertkit.py, ...):\n" + "\n".join(bad))


def test_unit_tests_touch_nothing_real():
    bad = [f"  tests/unit/{p.name}:{line}: {what} ({why})"
           for p in all_test_files() if tier_of(p) == "unit" for line, what, why in unit_violations(p)]
    assert not bad, ("unit tests that touch real things; move the file to tests/daemon (git mv), or the test "
                     "into a tests/daemon file, or make it in-process (fake clock, events):\n" + "\n".join(bad)
                     + "\n" + PLACEMENT)


def test_the_scan_sees_what_it_forbids(tmp_path: Path):
    src = ("import subprocess\nimport time\nfrom tests.test_stall import x\nfrom tests.helpers import wait_for\n"
           "def test_a(make_daemon):\n    time.sleep(1)\n    wait_for(lambda: 1)\n")
    tree = ast.parse(src)
    found = {what for _, what, _ in real_uses(tree)}
    assert found == {"import subprocess", "sleep", "wait_for", "fixture make_daemon"}
    assert imported_test_modules(tree) == ["tests.test_stall", "tests.test_stall.x"]
    clean = ast.parse("from tests.synth import Synth\nimport time\ndef test_b(tmp_path):\n    time.time()\n")
    assert real_uses(clean) == [] and imported_test_modules(clean) == []

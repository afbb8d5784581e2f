"""The layers of the package hold: the import-linter contract in pyproject.toml is kept, there is
no import cycle, an upward import breaks the contract (naming it), and every import placed inside
a function says why. The numbers in docs/architecture.md come from `python -m tests.archkit`."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from tests import archkit
from tests.helpers import REPO

#: An import the contract forbids: the state store (bottom) reaching up into the detectors.
PLANTED = "from watchdog.detectors import detector_modules  # planted by the test\n"


def _lint_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """Run the contract on the package copied under `tmp_path` (found first on sys.path, and from
    the working folder, which import-linter puts first; the real package's entry in sys.modules
    is set aside for the run, so grimp locates the copy)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "watchdog", raising=False)
    importlib.invalidate_caches()
    return archkit.check_contracts(tmp_path / "pyproject.toml")


def test_the_layer_contract_is_kept():
    kept, report = archkit.check_contracts()
    assert kept, report


def test_no_import_cycles():
    cycles = archkit.import_cycles(archkit.build_graph())
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_an_upward_import_breaks_the_contract_naming_it(tmp_path, monkeypatch):
    archkit.copy_package(tmp_path)
    state = tmp_path / "watchdog" / "core" / "state.py"
    text = state.read_text(encoding="utf-8")
    state.write_text(text.replace("from __future__ import annotations\n",
                                  "from __future__ import annotations\n" + PLANTED, 1), encoding="utf-8")
    line = state.read_text(encoding="utf-8").splitlines().index(PLANTED.rstrip("\n")) + 1
    kept, report = _lint_copy(tmp_path, monkeypatch)
    assert not kept
    assert f"watchdog.core.state -> watchdog.detectors (l.{line})" in report, report


def test_the_cycle_count_sees_a_cycle():
    """The counter itself: a cycle through three modules counts once, a lone edge not at all."""
    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
        modules = set(edges)

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert archkit.import_cycles(Graph()) == [["a", "b", "c"]]


def test_imports_inside_functions_say_why():
    """An import of a watchdog module placed inside a function hid cycles before; the ones left
    carry a comment on their line saying why they are there. The subcommands are exempt: each
    imports its machinery when it runs, so `--help` stays light (tests/daemon/test_cli.py)."""
    bare = [f"{f}:{line} {name}" for f, line, name, why in archkit.function_level_imports()
            if not f.startswith("watchdog/commands/") and not why]
    assert not bare, "imports inside functions without a comment saying why:\n" + "\n".join(bare)


def test_registry_lookups_are_only_the_declared_ones():
    """`watchdog.core.plugins.registry` is the one way a lower layer reaches a plugin registry
    above it; every name looked up is declared in REGISTRIES, and nothing else imports a watchdog
    module by a name in a string."""
    from watchdog.core.plugins import REGISTRIES

    looked_up, by_string = set(), []
    for path in sorted((REPO / "watchdog").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            arg = node.args[0].value
            if name == "registry":
                looked_up.add(arg)
            elif name == "import_module" and isinstance(arg, str) and re.match(r"watchdog\.", arg):
                by_string.append(f"{path.relative_to(REPO)}: {arg}")
    assert looked_up == set(REGISTRIES)
    assert not by_string, by_string

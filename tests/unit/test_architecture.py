"""The layers of the package hold: the import-linter contract in pyproject.toml is kept, there is
no import cycle, an upward import breaks the contract (naming it), and every import placed inside
a function says why. The numbers in docs/architecture.md come from `python -m tests.archkit`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests import archkit

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


def test_no_module_is_imported_by_a_computed_name():
    """Every import the program makes is an `import` statement the graph sees: plugins are listed
    in the composition root (`watchdog.plugins_list`), never looked up at run time."""
    found = archkit.dynamic_imports()
    assert found == [], "imports by a computed name (list the module in watchdog/plugins_list.py):\n" + "\n".join(found)


#: One dynamic import per spelling; each, planted below the root, must be found.
SPELLINGS = (
    "import importlib\nmod = importlib.import_module('watchdog.detectors')\n",
    "import importlib as il\nmod = il.import_module('watchdog.detectors')\n",
    "from importlib import import_module\nmod = import_module('watchdog.detectors')\n",
    "from importlib import import_module as im\nmod = im('watchdog.detectors')\n",
    "mod = __import__('watchdog.detectors')\n",
    "import builtins\nmod = builtins.__import__('watchdog.detectors')\n",
    "import importlib.util\nspec = importlib.util.spec_from_file_location('x', 'x.py')\n",
    "from importlib.util import spec_from_file_location, module_from_spec\n",
    "from importlib import util\nspec = util.find_spec('watchdog.detectors')\n",
    "import pkgutil\nmods = list(pkgutil.iter_modules(['.']))\n",
    "from pkgutil import walk_packages\n",
    "import runpy\nrunpy.run_module('watchdog.detectors')\n",
    "import sys\nmod = getattr(sys.modules['builtins'], '__import__')('watchdog.detectors')\n",
    "exec('import watchdog.detectors')\n",
    "mod = __builtins__['__import__']('watchdog.detectors')\n",
)


@pytest.mark.parametrize("planted", SPELLINGS)
def test_a_planted_dynamic_import_is_found_in_any_spelling(tmp_path, planted):
    archkit.copy_package(tmp_path)
    state = tmp_path / "watchdog" / "core" / "state.py"
    state.write_text(state.read_text(encoding="utf-8") + "\n\ndef _planted():\n"
                     + "".join(f"    {line}\n" for line in planted.splitlines()), encoding="utf-8")
    found = archkit.dynamic_imports(tmp_path / "watchdog")
    assert found and all(f.startswith("watchdog/core/state.py:") for f in found), found


def test_reading_package_data_is_not_a_dynamic_import(tmp_path):
    """`importlib.resources` and `importlib.metadata` read files, they import no module."""
    archkit.copy_package(tmp_path)
    state = tmp_path / "watchdog" / "core" / "state.py"
    state.write_text(state.read_text(encoding="utf-8")
                     + "\nfrom importlib import resources\nfrom importlib import metadata\n", encoding="utf-8")
    assert archkit.dynamic_imports(tmp_path / "watchdog") == []

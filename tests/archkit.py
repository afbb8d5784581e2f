"""The shape of the package's imports: the layer contract, the import cycles, the imports placed
inside functions. Used by tests/unit/test_architecture.py; run by hand for the numbers in
docs/architecture.md:

    .venv/bin/python -m tests.archkit            # this tree
    .venv/bin/python -m tests.archkit DIR        # the package in DIR/watchdog (e.g. an older commit's,
                                                 # from `git archive <commit> watchdog | tar -x -C DIR`)

The import graph is grimp's (the library import-linter is built on): every `import` statement,
at module level or inside a function, also under `if TYPE_CHECKING:`. An import by a name computed
at run time (`importlib`, `__import__`, `pkgutil`, ...) would not be in the graph: the package has
none (`dynamic_imports` finds them in any spelling), the composition root `watchdog.plugins_list`
imports every plugin by name.
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

from tests.helpers import REPO

PACKAGE = "watchdog"
CONFIG = REPO / "pyproject.toml"


def build_graph(package: str = PACKAGE):
    """grimp's import graph of `package` as found on sys.path (no cache: always the files now)."""
    import grimp

    return grimp.build_graph(package, cache_dir=None)


def import_cycles(graph) -> List[List[str]]:
    """The import cycles: each strongly connected component of more than one module (Tarjan's
    algorithm, iterative), modules sorted. One cycle through many modules counts once."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    on_stack: Set[str] = set()
    stack: List[str] = []
    out: List[List[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work: List[Tuple[str, List[str]]] = [(root, sorted(graph.find_modules_directly_imported_by(root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.find_modules_directly_imported_by(nxt))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def function_level_imports(root: Path = REPO / PACKAGE) -> List[Tuple[str, int, str, str]]:
    """(file, line, imported module, the comment on that line) of every import of a `watchdog`
    module placed inside a function of the package."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PACKAGE):
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names if a.name.startswith(PACKAGE)]
                else:
                    continue
                line = lines[node.lineno - 1]
                comment = line.split("#", 1)[1].strip() if "#" in line else ""
                rel = str(path.relative_to(root.parent))
                out += [(rel, node.lineno, name, comment) for name in names]
    return sorted(set(out))


#: Modules through which a program imports a module by a name computed at run time.
DYNAMIC_MODULES = ("importlib", "importlib.util", "importlib.machinery", "importlib.abc", "pkgutil",
                   "runpy", "imp", "zipimport", "builtins")
#: Names from `importlib` that only read package data or metadata, never import a module.
DATA_ONLY = ("resources", "metadata")
#: Names that import or load a module by a computed name, however they are reached (attribute,
#: bare name, or a string handed to getattr).
DYNAMIC_NAMES = ("__import__", "import_module", "find_spec", "spec_from_file_location",
                 "spec_from_loader", "module_from_spec", "exec_module", "load_module", "iter_modules",
                 "walk_packages", "find_loader", "get_loader", "run_module", "run_path", "reload",
                 "__builtins__")
#: Built-ins that run code from a string (`exec("import x")`), when called by their bare name (a
#: `.eval()` method or an "eval" phase is not one).
CODE_RUNNERS = ("exec", "eval")


def _dynamic_sites(tree: ast.AST) -> List[Tuple[int, str]]:
    """(line, what) of every way `tree` could import a module by a computed name."""
    out: List[Tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in DYNAMIC_MODULES:
                    out.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in DYNAMIC_MODULES:
            names = [a.name for a in node.names]
            if node.module != "importlib" or any(n not in DATA_ONLY for n in names):
                out.append((node.lineno, f"from {node.module} import {', '.join(names)}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CODE_RUNNERS:
            out.append((node.lineno, f"{node.func.id}(...)"))
        elif isinstance(node, ast.Name) and node.id in DYNAMIC_NAMES:
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in DYNAMIC_NAMES:
            out.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in DYNAMIC_NAMES:
            out.append((node.lineno, repr(node.value)))
    return out


def dynamic_imports(root: Path = REPO / PACKAGE) -> List[str]:
    """`path:line what` of every dynamic import under `root`: the import graph, and so the layer
    contract, would not see the edge it makes."""
    out: List[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        out.extend(f"{path.relative_to(root.parent)}:{line} {what}" for line, what in _dynamic_sites(tree))
    return out


def check_contracts(config: Path = CONFIG) -> Tuple[bool, str]:
    """Run import-linter's contracts of `config` on the package found on sys.path: (kept, report)."""
    import io
    from contextlib import redirect_stdout

    from importlinter.cli import lint_imports

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = lint_imports(config_filename=str(config), no_cache=True)
    return code == 0, buf.getvalue()


def copy_package(dest: Path) -> Path:
    """A copy of the package and the contract under `dest` (to plant imports in); returns `dest`."""
    shutil.copytree(REPO / PACKAGE, dest / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CONFIG, dest / CONFIG.name)
    return dest


def main(argv: List[str]) -> int:
    tree = Path(argv[0]).resolve() if argv else REPO
    if tree != REPO:  # measure another copy: found first, and nothing of this one imported
        assert PACKAGE not in sys.modules
        sys.path.insert(0, str(tree))
    graph = build_graph()
    cycles = import_cycles(graph)
    inner = function_level_imports(tree / PACKAGE)
    kept, report = check_contracts() if tree == REPO else (True, "")
    print(f"modules: {len(graph.modules)}")
    print(f"import cycles: {len(cycles)}")
    for c in cycles:
        print("  " + " <-> ".join(c))
    commands = [i for i in inner if i[0].startswith(f"{PACKAGE}/commands/")]
    print(f"imports inside functions: {len(inner)} ({len(commands)} in {PACKAGE}/commands/)")
    for f, line, name, why in inner:
        if not f.startswith(f"{PACKAGE}/commands/"):
            print(f"  {f}:{line} {name}" + (f"  # {why}" if why else ""))
    print(f"layer contract: {'kept' if kept else 'BROKEN'}" if tree == REPO else "layer contract: not checked")
    if not kept:
        print(report)
    return 0 if kept and not cycles else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

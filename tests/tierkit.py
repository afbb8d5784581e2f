"""The test tiers and what each may touch, read from the source of the test files (an AST scan).

tests/unit    in-process code only: no child process, no sleep or real-time wait, no socket or HTTP,
              no real daemon. The whole tier runs in well under two minutes.
tests/daemon  real things beyond the test's own call stack: the daemon as a subprocess, the CLI in
              a subprocess, child processes (ranks, launchers, npu-smi), HTTP on 127.0.0.1,
              waits on the real clock.
tests/e2e     scenario suites: a whole simulated node, fleet or framework run against the daemon,
              counting the messages each channel got.

Kits and helpers (helpers.py, jobkit.py, ... fakes/, fixtures/) stay at tests/ root; only
`test_*.py` files live in a tier folder, and no test module imports another test module.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "daemon", "e2e")

# Modules whose import makes a file more than a unit test.
REAL_MODULES = {
    "subprocess": "starts child processes",
    "multiprocessing": "starts child processes",
    "socket": "opens sockets",
    "socketserver": "serves on a socket",
    "http.server": "serves HTTP",
    "http.client": "talks HTTP",
    "urllib.request": "talks HTTP",
    "requests": "talks HTTP",
    "tests.jobkit": "starts a launcher and its ranks",
    "tests.fleet_kit": "starts nodes, a relay and Alertmanager",
    "tests.fakes.receivers": "serves HTTP on 127.0.0.1",
}
# Kit names whose use makes a file more than a unit test.
REAL_NAMES = {
    "Daemon": "starts the real daemon",
    "Server": "starts a server process",
    "run_cli": "runs the CLI in a subprocess",
    "http_get": "talks HTTP",
    "check_link": "talks HTTP",
    "free_port": "opens a socket",
    "wait_for": "waits on the real clock",
    "Children": "starts child processes",
    "Harness": "reads the real process table",
    "DemoRun": "runs the simulated node and the daemon",
    "demo_run": "runs the simulated node and the daemon",
}
# Fixtures (from tests/conftest.py) that start real processes.
REAL_FIXTURES = {"make_daemon": "starts the real daemon", "procs": "starts child processes"}

# Unit files allowed one of the above, each with the reason. Keep this short.
# Form: {"test_x.py": {"wait_for": "why it is needed and stays fast and deterministic"}}
UNIT_ALLOWED: Dict[str, Dict[str, str]] = {}


def all_test_files() -> Iterator[Path]:
    for p in sorted(TESTS.rglob("test_*.py")):
        if "__pycache__" not in p.parts:
            yield p


def imported_test_modules(tree: ast.AST) -> List[str]:
    """Test modules (`test_*`) this file imports; shared pieces belong in a kit module."""
    found = []
    for node in ast.walk(tree):
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found += [n for n in names if n.startswith("tests.") and any(
            part.startswith("test_") for part in n.split(".")[1:])]
    return sorted(set(found))


def _imports(tree: ast.AST) -> Iterator[Tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, node.lineno
            for a in node.names:
                yield f"{node.module}.{a.name}", node.lineno


def real_uses(tree: ast.AST) -> List[Tuple[int, str, str]]:
    """(line, what, why) for each thing in the file that a unit test may not touch."""
    uses = []
    for name, line in _imports(tree):
        for mod, why in REAL_MODULES.items():
            if name == mod or name.startswith(mod + "."):
                uses.append((line, f"import {mod}", why))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in REAL_NAMES:
            uses.append((node.lineno, node.id, REAL_NAMES[node.id]))
        elif isinstance(node, ast.Attribute) and node.attr == "sleep":
            uses.append((node.lineno, "sleep", "waits on the real clock"))
        elif isinstance(node, ast.ImportFrom) and node.module == "time" and any(a.name == "sleep" for a in node.names):
            uses.append((node.lineno, "time.sleep", "waits on the real clock"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in node.args.args:
                if arg.arg in REAL_FIXTURES:
                    uses.append((node.lineno, f"fixture {arg.arg}", REAL_FIXTURES[arg.arg]))
    return sorted(set(uses))


def tier_of(path: Path) -> str:
    rel = path.relative_to(TESTS)
    return rel.parts[0] if len(rel.parts) > 1 else ""


def unit_violations(path: Path) -> List[Tuple[int, str, str]]:
    """What a file does that a unit test may not, less what UNIT_ALLOWED grants it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    allowed = UNIT_ALLOWED.get(path.name, {})
    return [u for u in real_uses(tree) if u[1] not in allowed]


def suggested_tier(path: Path) -> str:
    """Where a test file belongs by what it touches (e2e is chosen by hand: scenario suites)."""
    return "daemon" if unit_violations(path) else "unit"


PLACEMENT = """Where a test file goes (tests/tierkit.py says why):
  tests/unit/    in-process only: no subprocess, no sleep or wait_for, no socket/HTTP, no daemon, no real processes
  tests/daemon/  starts the daemon (make_daemon, Daemon), the CLI (run_cli, subprocess), child processes
                 (procs, jobkit, liveness_kit), serves or fetches HTTP on 127.0.0.1, or waits on the real clock
  tests/e2e/     a whole scenario (DemoRun, fleet_kit, a framework run) counting messages per channel
Move it with `git mv tests/<file> tests/<tier>/<file>`; shared helpers go in a kit module at tests/ root
(tests/helpers.py, tests/synth.py, ...), never imported from another test_*.py."""

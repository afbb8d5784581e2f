import ast
import functools
import os
import subprocess
from pathlib import Path

import pytest

from watchdog.plugins_list import assemble

assemble()  # the composition root, as every entry point runs it
from tests.python3_link import link_python3

link_python3()  # before any child process: tests/python3_link.py says why
from tests.helpers import Daemon
from tests.pythons_kit import SHARED_ENV
from tests.hostile_kit import other_users_root


@pytest.fixture
def make_daemon(tmp_path):
    """Factory for real daemon subprocesses; all are stopped at the end of the test."""
    started = []

    def factory(config, env=None, start=True, extra_args=(), wrapper=()):
        d = Daemon(tmp_path, config, env=env, extra_args=extra_args, wrapper=wrapper)
        started.append(d)
        return d.start() if start else d

    yield factory
    for d in started:
        d.stop()


@pytest.fixture
def procs():
    """Starts real processes (stdin from /dev/null unless given); kills and reaps them at the end."""
    started = []

    def start(argv, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(argv, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.fixture
def other_root():
    """A folder an unprivileged second user (tests/hostile_kit.py) can reach; removed at the end."""
    with other_users_root() as root:
        yield root


def _declared_timeout(item) -> float:
    """The test's own `pytest.mark.timeout(seconds)`, 0 without one: a test that needs more than
    the default timeout (the Ansible roll-out: three playbook runs and a pip install) is the longest."""
    marker = item.get_closest_marker("timeout")
    try:
        return float(marker.args[0]) if marker and marker.args else 0.0
    except (TypeError, ValueError):
        return 0.0


def pytest_collection_modifyitems(config, items):
    """For the parallel run of `make test` (every tier in one session): tests marked slow start
    first, those with a longer timeout of their own before the other slow ones, so the run does not
    end waiting on one long test that started last; the unit tier comes last, its short tests
    filling the workers that the long tests leave idle at the end.

    The tests on the offline bundle built once per run (marked `bundle`) follow the other slow
    tests: `make test` builds the bundle beside the session (tests/pythons_kit.py, `prebuild`), and
    such a test waits for that build, holding its worker, so it should start when the build is
    (nearly) done. Without a build beside the session, the first of them builds the bundle and
    starts among the slow tests. Stable, so every worker collects the same order."""
    builder = None
    if not os.environ.get(SHARED_ENV):
        builder = next((item for item in items if item.get_closest_marker("bundle") is not None), None)

    def order(item):
        slow = item.get_closest_marker("slow") is not None
        waits = item.get_closest_marker("bundle") is not None and item is not builder
        unit = item.path.parent.name == "unit"
        return (not slow, waits, unit, -_declared_timeout(item))

    items.sort(key=order)


@functools.lru_cache(maxsize=None)
def _has_module_fixture(path: Path) -> bool:
    """Whether a test file defines a fixture shared beyond one test (module, package, session)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return True
    return any(isinstance(node, ast.keyword) and node.arg == "scope" and isinstance(node.value, ast.Constant)
               and node.value.value in ("module", "package", "session") for node in ast.walk(tree))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist load` (the daemon and e2e tiers in one session in `make test`): an e2e test is its
    own unit of work, so the long tests of one file spread over the workers; a daemon-tier file is
    one unit (as `--dist loadfile` ran that tier), and so is a file with a module-scoped fixture
    (a fleet, a built bundle, an install), so it is built once and its tests keep their order.
    Units are handed out in collection order, i.e. the slow tests first (see above), so no long
    test starts last and keeps one worker busy while the others are idle; xdist's default of
    reordering units by their number of tests would put a long test alone in its file (the
    Ansible roll-out) at the end. (xdist's own `--dist loadgroup` does not group on pytest 9.)
    Other modes are xdist's."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class TestOrFileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.startswith("tests/daemon/") or _has_module_fixture(config.rootpath / path):
                return path
            return nodeid

    return TestOrFileScheduling(config, log)

import subprocess

import pytest

from tests.helpers import Daemon


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


def pytest_collection_modifyitems(config, items):
    """For the parallel tiers (pytest-xdist, `--dist loadfile`): the files with tests marked slow
    start first, so a parallel run does not end waiting on one long file that started last.
    Stable, so every worker collects the same order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

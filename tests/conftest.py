import subprocess

import pytest

from tests.helpers import Daemon
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

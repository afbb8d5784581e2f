"""`status` and `silence list` on a node with no config file at the default path talk about the
daemon (not reachable, no state), not about an "invalid config"; a config named with -c that
does not exist is still an error."""

from __future__ import annotations

import os

import pytest

from tests.helpers import run_cli
from watchdog.service.defaults import DEFAULT_CONFIG_PATH

pytestmark = pytest.mark.skipif(os.path.exists(DEFAULT_CONFIG_PATH),
                                reason=f"{DEFAULT_CONFIG_PATH} exists on this machine")


def test_status_without_a_config_says_the_daemon_is_not_reachable(free_port_url):
    r = run_cli("status", "--url", free_port_url)
    assert r.returncode == 1 and "cannot reach the daemon" in r.stderr, r.stderr
    r = run_cli("status")
    out = r.stdout + r.stderr
    assert "invalid config" not in out and f"no config at {DEFAULT_CONFIG_PATH}; using the defaults" in out, out
    assert r.returncode == 0 or "cannot reach the daemon at http://127.0.0.1:9841" in out, out


def test_silence_list_without_a_config_says_there_is_no_state(tmp_path):
    missing = tmp_path / "no-state"
    r = run_cli("silence", "list", "--state-dir", str(missing))
    assert r.returncode == 1 and "no alert state in" in r.stderr and "invalid config" not in r.stderr, r.stderr
    assert not missing.exists()  # a listing never creates the daemon's folder
    r = run_cli("silence", "list")
    assert "invalid config" not in r.stdout + r.stderr, r.stderr


def test_a_named_config_that_does_not_exist_is_still_an_error(tmp_path):
    r = run_cli("status", "-c", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "no such file" in r.stderr


@pytest.fixture
def free_port_url():
    from tests.helpers import free_port

    return f"http://127.0.0.1:{free_port()}"

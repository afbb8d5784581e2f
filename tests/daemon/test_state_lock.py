"""One daemon per state folder: a second one refuses to start naming the first's pid; the lock of
a daemon killed with SIGKILL never blocks the next start."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, Daemon


def _second_daemon(tmp_path, cfg) -> "subprocess.CompletedProcess":
    """A second daemon on the same state folder (its own port and config file), run to its end."""
    second = Daemon(tmp_path, cfg)
    second.config_path = tmp_path / "second.yaml"
    second.write_config(second.config)
    return subprocess.run([sys.executable, "-m", "watchdog", "run", "-c", str(second.config_path)],
                          capture_output=True, text=True, cwd=str(REPO), timeout=60)


def test_second_daemon_refuses_and_a_killed_ones_lock_does_not_block(make_daemon, tmp_path):
    cfg = {"probes": {"commands": [{"name": "ok", "argv": ["/bin/true"], "interval": "1s", "timeout": "5s"}]}}
    first = make_daemon(cfg)
    out = _second_daemon(tmp_path, cfg)  # same state folder, its own port and config file
    assert out.returncode == 1, out.stderr
    assert f"another npu-watchdog (pid {first.proc.pid}) is already using the state folder" in out.stderr
    assert str(tmp_path / "state") in out.stderr
    assert "Traceback" not in out.stderr
    assert first.alive() and first.status()["pid"] == first.proc.pid

    first.kill9()  # the lock file stays behind with a dead pid in it
    assert (tmp_path / "state" / "daemon.lock").read_text().strip() == str(first.proc.pid)
    third = make_daemon(cfg)
    assert third.status()["pid"] == third.proc.pid
    assert (tmp_path / "state" / "daemon.lock").read_text().strip() == str(third.proc.pid)
    assert oct((tmp_path / "state" / "daemon.lock").stat().st_mode & 0o777) == "0o600"


def test_a_deleted_lock_file_lets_no_second_daemon_in(make_daemon, tmp_path):
    """`rm state/daemon.lock` (a cleanup script, a curious operator) let a second daemon start on
    the folder beside the first, and both paged every alert. The folder's own lock holds; the
    first daemon writes its lock file again."""
    from tests.helpers import wait_for

    cfg = {"probes": {"commands": [{"name": "ok", "argv": ["/bin/true"], "interval": "1s", "timeout": "5s"}]}}
    first = make_daemon(cfg)
    lock = tmp_path / "state" / "daemon.lock"
    lock.unlink()
    out = _second_daemon(tmp_path, cfg)
    assert out.returncode == 1, out.stderr
    assert "is already using the state folder" in out.stderr and "Traceback" not in out.stderr
    assert first.alive()
    wait_for(lambda: lock.exists() and lock.read_text().strip() == str(first.proc.pid), timeout=30,
             what="the first daemon's lock file written again")


def test_a_fifo_at_the_lock_file_is_set_aside_and_a_second_daemon_still_refused(make_daemon, tmp_path):
    """A FIFO at daemon.lock: the second daemon blocked for good reading the holder's pid from
    it instead of exiting 1. The first daemon sets it aside (damage) and writes a real lock file;
    the second is refused naming the first."""
    import os

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.mkfifo(state / "daemon.lock")
    cfg = {"probes": {"commands": [{"name": "ok", "argv": ["/bin/true"], "interval": "1s", "timeout": "5s"}]}}
    first = make_daemon(cfg)
    assert (state / "daemon.lock").read_text().strip() == str(first.proc.pid)
    assert len(list(state.glob("daemon.lock.corrupt-*"))) == 1
    out = _second_daemon(tmp_path, cfg)
    assert out.returncode == 1, out.stderr
    assert f"another npu-watchdog (pid {first.proc.pid}) is already using the state folder" in out.stderr

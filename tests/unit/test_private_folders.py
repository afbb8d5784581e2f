"""The daemon's private folders and its lock file (watchdog.wiring.startup.ensure_private_dir,
watchdog.service.statelock.acquire): a folder another user owns is taken over with a warning, a
lock file left world-writable is tightened."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from tests.helpers import logged
from watchdog.service import statelock
from watchdog.wiring.startup import ensure_private_dir


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_state_folder_another_user_owns_is_taken_over_with_a_warning(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    os.chown(state, 65534, 65534)  # nobody: could read and change the alert state and silences
    with logged("watchdog.daemon", logging.WARNING) as records:
        ensure_private_dir(str(state))
    st = os.stat(state)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    assert any("belonged to uid 65534" in r.getMessage() for r in records), records


def test_an_own_folder_is_only_tightened_and_a_loose_lock_file_is_made_private(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    with logged("watchdog.daemon", logging.WARNING) as records:
        ensure_private_dir(str(state))
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700 and records == []
    lock = state / statelock.LOCK_NAME
    lock.write_text("")
    os.chmod(lock, 0o666)
    fd = statelock.acquire(str(state))
    try:
        assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    finally:
        os.close(fd)

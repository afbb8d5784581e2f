"""The daemon's private folders and its lock file (watchdog.wiring.startup.ensure_private_dir,
watchdog.service.statelock.acquire): a folder another user owns is taken over with a warning, a
lock file left world-writable is tightened."""

from __future__ import annotations

import contextlib
import logging
import os
import stat

import pytest

from watchdog.service import statelock
from watchdog.wiring.startup import ensure_private_dir


@contextlib.contextmanager
def _warnings():
    """The daemon logger's warnings, by a handler of its own (another test in the same worker may
    have configured the logging tree: caplog's propagation is not to be relied on)."""
    said: list = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("watchdog.daemon")
    # A logging set-up of an earlier test in this worker (dictConfig) may have disabled it.
    level, disabled, floor = logger.level, logger.disabled, logging.root.manager.disable
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.disabled = False
    logging.disable(logging.NOTSET)
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.disabled = disabled
        logging.disable(floor)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_state_folder_another_user_owns_is_taken_over_with_a_warning(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    os.chown(state, 65534, 65534)  # nobody: could read and change the alert state and silences
    with _warnings() as said:
        ensure_private_dir(str(state))
    st = os.stat(state)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    assert any("belonged to uid 65534" in m for m in said), said


def test_an_own_folder_is_only_tightened_and_a_loose_lock_file_is_made_private(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    with _warnings() as said:
        ensure_private_dir(str(state))
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700 and said == []
    lock = state / statelock.LOCK_NAME
    lock.write_text("")
    os.chmod(lock, 0o666)
    fd = statelock.acquire(str(state))
    try:
        assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    finally:
        os.close(fd)

"""statefiles.atomic_file: the one way the daemon replaces a file (JSON state, the rebuilt alert
database, evidence bundles, doctor records). A reader sees the old or the new content, never a
torn file; a failure leaves no temporary file; the mode is exactly the one asked for."""

from __future__ import annotations

import os
import stat

import pytest

from watchdog.service import statefiles


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_replaces_with_exact_mode_whatever_the_umask(tmp_path):
    path = str(tmp_path / "state.json")
    with open(path, "w") as fh:
        fh.write("old")
    os.chmod(path, 0o644)
    old_umask = os.umask(0o077)  # would tighten a 0640 request to 0600
    try:
        with statefiles.atomic_file(path, mode=0o640) as fh:
            fh.write(b"new")
            with open(path) as seen:
                assert seen.read() == "old"  # not visible before the block ends
    finally:
        os.umask(old_umask)
    with open(path) as fh:
        assert fh.read() == "new"
    assert _mode(path) == 0o640
    assert os.listdir(tmp_path) == ["state.json"]


def test_failure_keeps_the_old_content_and_no_temporary_file(tmp_path):
    path = str(tmp_path / "state.json")
    statefiles.write_json(path, {"version": 1, "data": {"a": 1}})
    assert _mode(path) == 0o600
    with pytest.raises(RuntimeError):
        with statefiles.atomic_file(path) as fh:
            fh.write(b"half")
            raise RuntimeError("disk full")
    assert statefiles.read_json(path, 1) == {"a": 1}
    assert os.listdir(tmp_path) == ["state.json"]


def test_exclusive_refuses_a_leftover_and_keeps_it(tmp_path):
    path = str(tmp_path / "bundle.tar.gz")
    tmp = str(tmp_path / ".bundle.tar.gz.partial")
    with open(tmp, "wb") as fh:
        fh.write(b"leftover")
    with pytest.raises(FileExistsError):
        with statefiles.atomic_file(path, tmp=tmp, exclusive=True) as fh:
            fh.write(b"x")
    assert not os.path.exists(path)
    with open(tmp, "rb") as fh:  # not ours: neither truncated nor removed
        assert fh.read() == b"leftover"
    os.unlink(tmp)
    with statefiles.atomic_file(path, tmp=tmp, exclusive=True, sync=True) as fh:
        fh.write(b"complete")
    with open(path, "rb") as fh:
        assert fh.read() == b"complete"
    assert os.listdir(tmp_path) == ["bundle.tar.gz"]

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


def test_two_threads_writing_one_file_never_leave_it_torn(tmp_path):
    """A logs round saving its offsets while the shutdown closes the probe (which saves them too):
    two writers of one file once shared its temporary file, and the file renamed in place held the
    shorter document followed by the tail of the longer one. A reader beside them must only ever
    read one whole document or the other; and the table of writers is empty after."""
    import json
    import threading

    path = str(tmp_path / "offsets.json")
    docs = [{"files": {f"/logs/rank{i}.log": {"offset": i} for i in range(n)}} for n in (1, 40)]
    bad: list = []
    done = threading.Event()

    def write(doc):
        for _ in range(800):
            try:
                statefiles.write_json(path, doc, sync=False)
            except OSError as exc:  # the other writer renamed the shared temporary file away
                bad.append(f"write failed: {exc}")

    def read():
        while not done.is_set():
            try:
                with open(path, encoding="utf-8") as fh:
                    doc = json.load(fh)
            except FileNotFoundError:
                continue
            except ValueError as exc:
                bad.append(f"torn: {exc}")
                continue
            if doc not in docs:
                bad.append(f"neither document: {str(doc)[:80]}")

    reader = threading.Thread(target=read)
    writers = [threading.Thread(target=write, args=(doc,)) for doc in docs]
    reader.start()
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    done.set()
    reader.join()
    assert bad == [], f"{len(bad)} bad reads or writes, first: {bad[:3]}"
    assert statefiles._turns == {} and not os.path.exists(path + ".tmp")

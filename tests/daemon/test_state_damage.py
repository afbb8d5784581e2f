"""Damaged state files: set aside (kept, renamed), a finding and a log line, and the daemon starts
with fresh state instead of crash-looping (issue: a corrupt alerting.sqlite3 meant exit 1 forever)."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from tests.helpers import wait_for

LOGS = "log-offsets.json"


def _damaged(d, file: str):
    return [f for f in d.status()["findings"] if f["rule"] == "state_damaged" and f["labels"]["file"] == file]


def _truncated_database(path) -> bytes:
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE alerts (fp TEXT PRIMARY KEY, finding TEXT)")
    db.executemany("INSERT INTO alerts VALUES (?, ?)", [(f"fp{i}", "x" * 500) for i in range(2000)])
    db.commit()
    db.close()
    data = path.read_bytes()
    return data[: len(data) // 3]


@pytest.mark.parametrize("kind", ["garbage", "truncated"])
def test_corrupt_alert_database_is_set_aside_and_the_daemon_starts(make_daemon, tmp_path, kind):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = state / "alerting.sqlite3"
    bad = b"this is not a database\x00" * 300 if kind == "garbage" else _truncated_database(tmp_path / "t.db")
    db.write_bytes(bad)
    d = make_daemon({"probes": {"commands": [{"name": "ok", "argv": ["/bin/true"], "interval": "1s"}]}})
    f = wait_for(lambda: _damaged(d, "alerting.sqlite3"), what="state_damaged finding")[0]
    kept = list(state.glob("alerting.sqlite3.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == bad
    assert f["severity"] == "warning" and str(kept[0]) in f["summary"]
    assert "state file" in d.log() and "is damaged" in d.log() and str(kept[0]) in d.log()
    # The fresh database works: the daemon is watching and keeps state across a restart.
    assert sqlite3.connect(str(db)).execute("PRAGMA quick_check").fetchone() == ("ok",)
    assert d.stop() == 0
    d2 = make_daemon({"probes": {"commands": [{"name": "ok", "argv": ["/bin/true"], "interval": "1s"}]}})
    time.sleep(1.5)
    assert not _damaged(d2, "alerting.sqlite3")
    assert len(list(state.glob("alerting.sqlite3.corrupt-*"))) == 1


@pytest.mark.parametrize("content", [b"{\"version\": 1, \"files\": {\"/x\": {\"offset\": \"ten\"}", b"\xff\xfe\x00garbage",
                                     b"[1, 2, 3]"])
def test_corrupt_log_offsets_are_set_aside_and_logs_still_alert(make_daemon, tmp_path, content):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / LOGS).write_bytes(content)
    log = tmp_path / "rank3.log"
    log.write_text("step 1\n")
    d = make_daemon({"probes": {"logs": {"enabled": True, "interval": "1s", "sources": [{"name": "train", "paths": [str(log)]}]}}})
    wait_for(lambda: _damaged(d, LOGS), what="state_damaged finding for the offsets")
    kept = list(state.glob(LOGS + ".corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == content
    time.sleep(1.5)
    with open(log, "a") as fh:
        fh.write("{'loss': nan, 'grad_norm': nan}\n")
    wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "log_nan"], what="log_nan after fresh start")
    saved = wait_for(lambda: json.loads((state / LOGS).read_text()), what="offsets saved again")
    assert str(log) in saved["files"]


def test_a_database_that_cannot_be_written_at_start_is_not_set_aside(tmp_path):
    """A storage fault (here: a new database in a folder no file can be created in) is not damage:
    the start fails on it, but nothing is renamed or reported as a damaged file."""
    import subprocess

    from watchdog.service import statefiles
    from watchdog.alerting.deliver.store import DB_NAME, AlertStore

    state = tmp_path / "state"
    state.mkdir()
    (state / DB_NAME).write_bytes(b"")  # created by a start that got no further
    if subprocess.run(["chattr", "+i", str(state)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i refused: cannot make a folder read-only for root here")
    before = len(statefiles.events())
    try:
        with pytest.raises(sqlite3.OperationalError):
            AlertStore(str(state), quarantine_damaged=True)
    finally:
        subprocess.run(["chattr", "-i", str(state)], capture_output=True)
    assert len(statefiles.events()) == before
    assert sorted(p.name for p in state.iterdir()) == [DB_NAME]


@pytest.mark.parametrize("kind", ["fifo", "devzero"])
def test_log_offsets_that_are_not_a_file_are_set_aside_not_read(make_daemon, tmp_path, kind):
    """A FIFO there blocked the log probe's first round in open() for good (probe_down, and a NaN
    line never paged); a link to /dev/zero was read until memory ran out. Both are damage: set
    aside unread, and the logs are followed."""
    import os

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if kind == "fifo":
        os.mkfifo(state / LOGS)
    else:
        os.symlink("/dev/zero", state / LOGS)
    log = tmp_path / "rank3.log"
    log.write_text("step 1\n")
    d = make_daemon({"probes": {"logs": {"enabled": True, "interval": "1s", "sources": [{"name": "train", "paths": [str(log)]}]}}})
    wait_for(lambda: _damaged(d, LOGS), what="state_damaged finding for the offsets")
    assert "not a regular file" in _damaged(d, LOGS)[0]["summary"] or "not a regular file" in d.log()
    assert len(list(state.glob(LOGS + ".corrupt-*"))) == 1
    time.sleep(1.5)
    with open(log, "a") as fh:
        fh.write("{'loss': nan, 'grad_norm': nan}\n")
    wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "log_nan"], what="log_nan after fresh start")
    assert not [p for p in d.status()["probes"] if p["name"] == "logs" and not p["up"]]


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling link", "journal directory"])
def test_a_database_that_is_not_a_file_is_set_aside_and_pages_go_out(make_daemon, tmp_path, kind):
    """alerting.sqlite3 (or its -journal) as a directory, a FIFO or a dangling link: SQLite cannot
    use it, and the daemon ran on in-memory state with every page held for as long as it stayed
    (restarts included). Set aside as damage; a fresh database takes the pages."""
    import os

    from tests.fakes.receivers import Receiver

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = state / "alerting.sqlite3"
    if kind == "directory":
        db.mkdir()
    elif kind == "fifo":
        os.mkfifo(db)
    elif kind == "dangling link":
        os.symlink(tmp_path / "nowhere.sqlite3", db)
    else:
        (state / "alerting.sqlite3-journal").mkdir()
    with Receiver("webhook") as rx:
        d = make_daemon({"probes": {"jitter": "0s", "commands": [
            {"name": "fail", "argv": ["/bin/false"], "interval": "1s", "timeout": "5s"}]},
            "alerting": {"group_window": "1s", "channels": [{"type": "webhook", "name": "h", "url": rx.url}]}})
        wait_for(lambda: any(a["labels"]["alertname"] == "command_check" for r in rx.accepted() for a in r.json["alerts"]),
                 timeout=60, what="the page, not held")
        assert db.is_file() and not db.is_symlink()
        assert list(state.glob("alerting.sqlite3*.corrupt-*")), sorted(p.name for p in state.iterdir())
        assert not [f for f in d.status()["findings"] if f["rule"] == "state_unwritable"]

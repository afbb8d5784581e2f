"""The real daemon with its state folder failing under it: made read-only before the first
evaluation, filled to ENOSPC on a real small filesystem, deleted with `rm -rf`. In each case a
failure line arrives in a watched log; the page must arrive exactly once after the fault clears,
the daemon must keep running, and while the folder cannot be written the `state_unwritable`
alert goes out directly (not through the failing store), once, and resolves once.

Each test counts the messages each channel received (firing and resolved). The faults are real:
root ignores permission bits, so "read-only" is an immutable folder (`chattr +i`, which stops
root too), and "full" is a small tmpfs mounted on the state folder and filled up.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import http_get, wait_for

pytestmark = pytest.mark.slow

OOM = b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity)\n"


def messages(rx):
    """(status, alert rules) of every message the receiver accepted, in order."""
    return [(r.json["status"], sorted(a["labels"]["alertname"] for a in r.json["alerts"])) for r in rx.accepted()]


def config(tmp: Path, pager: Receiver, ops: Receiver) -> dict:
    return {
        # Snapshots outside the state folder: the tmpfs of the ENOSPC test is for the state alone.
        "paths": {"state_dir": str(tmp / "state"), "snapshot_dir": str(tmp / "snapshots")},
        "probes": {"logs": {"enabled": True, "interval": "1s", "rescan": "1s", "hold": "1h",
                            "sources": [{"name": "train", "paths": [str(tmp / "logs" / "*.log")]}]}},
        "alerting": {
            "group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms", "retry_max": "1s",
            "channels": [
                {"type": "webhook", "name": "pager", "url": pager.url, "matchers": ["rule=log_oom"]},
                {"type": "webhook", "name": "ops", "url": ops.url, "matchers": ["rule=state_unwritable"]},
            ]},
    }


def logfile(tmp: Path) -> Path:
    (tmp / "logs").mkdir()
    log = tmp / "logs" / "train_rank0.log"
    log.write_bytes(b"step 1 loss 2.5\n")
    return log


def followed(d) -> None:
    wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="log followed")


def settle(d, rounds: int = 4) -> None:
    """Let a few probe rounds and group windows pass, so a message that should not exist would have."""
    runs = {p["name"]: p["runs_total"] for p in d.status()["probes"]}
    wait_for(lambda: all(p["runs_total"] >= runs[p["name"]] + rounds for p in d.status()["probes"]),
             what=f"{rounds} more probe rounds")
    time.sleep(2)


def check_page(pager: Receiver) -> None:
    [page] = pager.accepted()
    [alert] = page.json["alerts"]
    assert alert["labels"]["alertname"] == "log_oom" and alert["labels"]["host"] == "node-t", alert["labels"]
    assert alert["labels"]["rank"] == "0", alert["labels"]


def unwritable_reported(d) -> None:
    """While the fault lasts: the metric, the /healthz detail, the finding in the status."""
    wait_for(lambda: d.metrics().get("npu_watchdog_state_writable") == 0, what="npu_watchdog_state_writable 0")
    assert d.metrics()["npu_watchdog_state_write_errors_total"] >= 1
    code, body = http_get(d.url + "/healthz")
    assert code == 200 and "state folder" in body, (code, body)
    assert any(f["rule"] == "state_unwritable" for f in d.status()["findings"])


def writable_again(d) -> None:
    wait_for(lambda: d.metrics().get("npu_watchdog_state_writable") == 1, what="npu_watchdog_state_writable 1")
    assert "state folder" not in http_get(d.url + "/healthz")[1]
    assert not any(f["rule"] == "state_unwritable" for f in d.status()["findings"])


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {done.stderr.decode(errors='replace').strip()}")


class ReadOnly:
    """Make a folder read-only for root, for real: `immutable` sets the immutable flag (no file
    can be created, renamed or removed in it: SQLite cannot create its journal beside the
    database); `mount` bind-mounts it onto itself read-only (every write fails with EROFS; SQLite
    opens the database read-only)."""

    def __init__(self, how: str, folder: Path):
        self.how, self.folder = how, str(folder)
        self.mounted = False

    def on(self) -> None:
        if self.how == "immutable":
            _run("chattr", "+i", self.folder)
        else:
            _run("mount", "--bind", self.folder, self.folder)
            self.mounted = True
            _run("mount", "-o", "remount,bind,ro", self.folder)

    def off(self) -> None:
        if self.how == "immutable":
            _run("chattr", "-i", self.folder)
        elif self.mounted:
            _run("mount", "-o", "remount,bind,rw", self.folder)  # the daemon's files stay open on it

    def cleanup(self) -> None:
        try:
            self.off()
        except OSError:
            pass
        if self.mounted:
            subprocess.run(["umount", "-l", self.folder], capture_output=True)


@pytest.mark.parametrize("how", ["immutable", "mount"])
def test_read_only_state_folder_before_the_first_evaluation_pages_once_when_writable(
        make_daemon, tmp_path, how) -> None:
    """Row 1: the state exists from an earlier run, the folder becomes read-only and the daemon
    starts with a failure line already waiting in a watched log."""
    log = logfile(tmp_path)
    fault = ReadOnly(how, tmp_path / "state")
    with Receiver("webhook") as pager, Receiver("webhook") as ops:
        d = make_daemon(config(tmp_path, pager, ops))
        followed(d)
        assert d.stop() == 0  # the state (database, offsets) exists now
        with open(log, "ab") as fh:
            fh.write(OOM)  # written while the daemon is down: read at the next start
        try:
            try:
                fault.on()
            except OSError as exc:
                pytest.skip(f"this machine refuses to make a folder read-only for root: {exc}")
            d.start()
            ops.wait_for(1)  # state_unwritable, sent directly
            unwritable_reported(d)
            settle(d)
            assert d.alive() and pager.accepted() == [], "the page cannot be committed: it waits"
            fault.off()
            pager.wait_for(1)
            ops.wait_for(2)
            writable_again(d)
            settle(d)
            assert d.alive()
            check_page(pager)
            assert messages(pager) == [("firing", ["log_oom"])]
            assert messages(ops) == [("firing", ["state_unwritable"]), ("resolved", ["state_unwritable"])]
            assert "Traceback" not in d.log()
            assert d.log().count("alert log_oom firing") == 1, "a retried pass logs its alert once"
            d.stop()
        finally:
            fault.cleanup()


def _fill(folder: Path) -> Path:
    """Fill the filesystem of `folder` until writes fail with ENOSPC."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (1 << 16, 512):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


def test_full_state_filesystem_pages_once_when_space_is_freed(make_daemon, tmp_path) -> None:
    """Row 2: the state folder is a small tmpfs; it is filled to ENOSPC, a failure line arrives,
    then the space is freed."""
    log = logfile(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(state)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for ENOSPC: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        with Receiver("webhook") as pager, Receiver("webhook") as ops:
            d = make_daemon(config(tmp_path, pager, ops))
            followed(d)
            filler = _fill(state)
            with open(log, "ab") as fh:
                fh.write(OOM)
            ops.wait_for(1)
            unwritable_reported(d)
            settle(d)
            assert d.alive() and pager.accepted() == [], "the page cannot be committed: it waits"
            filler.unlink()
            pager.wait_for(1)
            ops.wait_for(2)
            writable_again(d)
            settle(d)
            check_page(pager)
            assert messages(pager) == [("firing", ["log_oom"])]
            assert messages(ops) == [("firing", ["state_unwritable"]), ("resolved", ["state_unwritable"])]
            d.stop()
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


def rm_rf(path) -> None:
    """`rm -rf` as an operator runs it, again when it says "Directory not empty": the daemon may
    write a file into the folder between the emptying and the `rmdir` (it heals its state as soon
    as it sees it gone), and `rm -rf` fails on that race as `shutil.rmtree` does."""
    for _ in range(50):
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise
    raise AssertionError(f"{path} could not be removed in 50 tries")


def test_deleted_state_folder_is_recreated_and_the_page_arrives_once(make_daemon, tmp_path) -> None:
    """Row 3: `rm -rf` of the state folder under the running daemon, then a failure line."""
    log = logfile(tmp_path)
    state = tmp_path / "state"
    with Receiver("webhook") as pager, Receiver("webhook") as ops:
        d = make_daemon(config(tmp_path, pager, ops))
        followed(d)
        rm_rf(state)
        with open(log, "ab") as fh:
            fh.write(OOM)
        pager.wait_for(1)
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(state / "alerting.sqlite3").st_mode) == 0o600
        assert "re-created" in d.log()
        settle(d)
        check_page(pager)
        assert messages(pager) == [("firing", ["log_oom"])]
        # Re-created at once: there was no time when the folder could not be written.
        assert messages(ops) == []
        assert d.metrics()["npu_watchdog_state_writable"] == 1
        # The folder's lock is taken again (at the main loop's next turn): a second daemon is refused.
        wait_for(lambda: "lock of the state folder" in d.log(), what="the lock taken again")
        second = make_daemon(config(tmp_path, pager, ops), start=False)
        second.start(wait=False)
        assert second.proc.wait(30) == 1, second.log()
        assert "already using the state folder" in second.log()
        assert pager.accepted() and len(pager.accepted()) == 1


@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_a_database_damaged_in_place_is_set_aside_and_rebuilt_and_the_page_arrives_once(make_daemon, tmp_path, how):
    """`: > alerting.sqlite3` or garbage written over it under the running daemon, then a failure
    line. The folder stays writable, so this is damage, not `state_unwritable`: the file is set
    aside (`state_damaged`), a fresh one is rebuilt from the engine's memory (a silence added
    before carries over) and the page is sent once. Before, every commit failed as if the folder
    could not be written, and the page was held until a restart."""
    from tests.helpers import run_cli

    log = logfile(tmp_path)
    state = tmp_path / "state"
    with Receiver("webhook") as pager, Receiver("webhook") as ops:
        d = make_daemon(config(tmp_path, pager, ops))
        followed(d)
        out = run_cli("silence", "add", "-c", str(d.config_path), "--match", "rule=log_nan", "--for", "1h",
                      "--comment", "known loss spikes")
        assert out.returncode == 0, out.stderr
        sid = out.stdout.split()[1]
        wait_for(lambda: d.metrics()["npu_watchdog_silences_active"] == 1, what="silence picked up")
        with open(state / "alerting.sqlite3", "r+b") as fh:
            if how == "truncated":
                fh.truncate(0)
            else:
                fh.write(b"garbage!" * 4096)
        with open(log, "ab") as fh:
            fh.write(OOM)
        pager.wait_for(1)
        settle(d)
        check_page(pager)
        assert messages(pager) == [("firing", ["log_oom"])]
        assert messages(ops) == []  # the folder could be written all along
        (damaged,) = [f for f in d.status()["findings"] if f["rule"] == "state_damaged"]
        kept = list(state.glob("alerting.sqlite3.corrupt-*"))
        assert len(kept) == 1 and str(kept[0]) in damaged["summary"], damaged
        assert "damaged under the running daemon" in d.log() and "1 silences carried over" in d.log()
        assert d.metrics()["npu_watchdog_state_writable"] == 1
        assert sid in run_cli("silence", "list", "-c", str(d.config_path)).stdout

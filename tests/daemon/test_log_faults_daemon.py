"""The real daemon's log probe under faults: offsets that cannot be saved, a writer that keeps
writing to a rotated-away file, colour codes and NULs in failure lines, unreadable paths.
Each test counts the messages every channel received (firing and resolved)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for

def messages(rx):
    """(status, alert rules) of every message the receiver accepted, in order."""
    return [(r.json["status"], sorted(a["labels"]["alertname"] for a in r.json["alerts"])) for r in rx.accepted()]


def config(logdir: Path, pager: Receiver, ops: Receiver, paths=None) -> dict:
    return {
        # rescan 1s: a full round every second besides the change events, so the faults below
        # (a save that fails, a path that becomes readable) are met while the logs are idle too.
        "probes": {"logs": {"enabled": True, "interval": "1s", "rescan": "1s", "hold": "1h",
                            "sources": [{"name": "train", "paths": paths or [str(logdir / "*.log")]}]}},
        "alerting": {
            "group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms", "retry_max": "1s",
            "channels": [
                {"type": "webhook", "name": "pager", "url": pager.url, "min_severity": "critical"},
                {"type": "webhook", "name": "ops", "url": ops.url, "min_severity": "warning",
                 "matchers": ["rule=~log_offsets_unsaved|log_unreadable"]},
            ]},
    }


def findings(d, rule):
    return [f for f in d.status()["findings"] if f["rule"] == rule]


def settle(d, rounds: int = 3) -> None:
    """Let a few log rounds and group windows pass, so a message that should not exist would have."""
    n = d.status()["probes"]
    runs = {p["name"]: p["runs_total"] for p in n}
    wait_for(lambda: all(p["runs_total"] >= runs[p["name"]] + rounds for p in d.status()["probes"]),
             what=f"{rounds} more probe rounds")


def test_offsets_unsaved_then_recovered_and_a_writer_on_the_rotated_file(make_daemon, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_bytes(b"")
    with Receiver("webhook") as pager, Receiver("webhook") as ops:
        cfg = config(logdir, pager, ops)
        # A window both findings below fall into: the watchdog's own alert must still get its
        # own message, or it would wait for the NaN's one-hour hold to resolve.
        cfg["alerting"]["group_window"] = "4s"
        d = make_daemon(cfg)
        wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
        # The fault: where the offsets' temporary file goes there is now a directory (root cannot
        # write there either), so every save fails.
        blocker = tmp_path / "state" / "log-offsets.json.tmp"
        blocker.mkdir()
        (blocker / "x").write_bytes(b"")
        wait_for(lambda: findings(d, "log_offsets_unsaved"), what="log_offsets_unsaved finding")
        # a failure line during the fault, hidden in colour codes, still pages (within the group
        # window the offsets alert just opened)
        with open(log, "ab") as fh:
            fh.write(b"step 40 \x1b[1;31mloss\x1b[0m: \x1b[31mnan\x1b[0m\n")
        assert d.metrics()["npu_watchdog_log_offsets_saved"] == 0
        ops.wait_for(1)
        pager.wait_for(1)
        nan = findings(d, "log_nan")[0]
        assert nan["evidence"][0] == "step 40 loss: nan"
        # recovery: the next save works, the finding resolves, saving goes on
        shutil.rmtree(blocker)
        ops.wait_for(2)
        assert d.metrics()["npu_watchdog_log_offsets_saved"] == 1
        assert d.metrics()["npu_watchdog_log_offsets_save_errors_total"] >= 1
        assert "log offsets saved to" in d.log() and "cannot save log offsets" in d.log()
        # rename-and-create while the writer keeps its old handle, then an OOM through that handle
        writer = open(log, "ab", buffering=0)
        try:
            os.rename(log, logdir / "train_rank0.log.1")
            log.write_bytes(b"")
            wait_for(lambda: d.metrics()['npu_watchdog_log_rotations_total{source="train"}'] == 1, what="rotation")
            writer.write(b"RuntimeError: NPU out of mem\x00ory. Tried to allocate 2.00 GiB (NPU 0; 60 GiB total)\n")
            pager.wait_for(2)
        finally:
            writer.close()
        settle(d)
        assert messages(pager) == [("firing", ["log_nan"]), ("firing", ["log_oom"])]
        assert messages(ops) == [("firing", ["log_offsets_unsaved"]), ("resolved", ["log_offsets_unsaved"])]


def _drop_dac() -> tuple:
    """Root reads everything; to make a path unreadable for the daemon, run it without the
    capabilities that bypass file permissions (uid stays 0: its own files stay writable)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root needs setpriv (Debian package util-linux) to drop CAP_DAC_OVERRIDE")
    caps = "-dac_override,-dac_read_search"
    return (setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", "--")


def test_unreadable_file_and_directory_are_reported_then_read(make_daemon, tmp_path: Path) -> None:
    wrapper = _drop_dac()
    logdir, hidden = tmp_path / "logs", tmp_path / "hidden"
    logdir.mkdir()
    hidden.mkdir()
    locked = logdir / "train_rank1.log"
    locked.write_bytes(b"")
    (hidden / "train_rank2.log").write_bytes(b"")
    locked.chmod(0)
    hidden.chmod(0)
    try:
        with Receiver("webhook") as pager, Receiver("webhook") as ops:
            d = make_daemon(config(logdir, pager, ops, paths=[str(logdir / "*.log"), str(hidden / "*.log")]),
                            wrapper=wrapper)
            f = wait_for(lambda: findings(d, "log_unreadable"), what="log_unreadable finding")[0]
            assert f["labels"]["source"] == "train" and f["severity"] == "warning"
            assert any(str(locked) in e for e in f["evidence"]) and any(str(hidden) in e for e in f["evidence"])
            assert d.metrics()['npu_watchdog_log_unreadable_paths{source="train"}'] == 2
            assert f"cannot read log path {hidden}" in d.log()
            ops.wait_for(1)
            locked.chmod(0o644)
            hidden.chmod(0o755)
            ops.wait_for(2)
            wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 2, what="both followed")
            with open(hidden / "train_rank2.log", "ab") as fh:
                fh.write(b"{'loss': nan, 'grad_norm': nan}\n")
            pager.wait_for(1)
            settle(d)
            assert messages(pager) == [("firing", ["log_nan"])]
            assert messages(ops) == [("firing", ["log_unreadable"]), ("resolved", ["log_unreadable"])]
            assert findings(d, "log_nan")[0]["labels"]["rank"] == "2"
    finally:
        locked.chmod(0o644)
        hidden.chmod(0o755)


def test_a_fifo_a_device_and_a_dangling_link_where_logs_should_be_are_reported(make_daemon, tmp_path: Path) -> None:
    """Matched by a source's glob or named by it: a FIFO, a link to /dev/zero and a dangling link
    were skipped in silence (no finding, no warning, the metric 0), while a real file beside them
    was read. They are `log_unreadable` now, never opened (a FIFO's reader blocks, /dev/zero never
    ends), and the real file's NaN still pages."""
    import os

    logdir = tmp_path / "logs"
    logdir.mkdir()
    os.mkfifo(logdir / "rank0.log")
    os.symlink("/dev/zero", logdir / "rank1.log")
    os.symlink(logdir / "gone.log", logdir / "rank2.log")
    real = logdir / "rank3.log"
    real.write_bytes(b"step 1\n")
    with Receiver("webhook") as pager, Receiver("webhook") as ops:
        d = make_daemon(config(logdir, pager, ops))
        f = wait_for(lambda: findings(d, "log_unreadable"), what="log_unreadable finding")[0]
        for n in (0, 1, 2):
            assert any(f"rank{n}.log: not a regular file" in e for e in f["evidence"]), f["evidence"]
        assert d.metrics()['npu_watchdog_log_unreadable_paths{source="train"}'] == 3
        with open(real, "ab") as fh:
            fh.write(b"{'loss': nan, 'grad_norm': nan}\n")
        pager.wait_for(1)
        settle(d)
        assert messages(pager) == [("firing", ["log_nan"])]
        assert messages(ops) == [("firing", ["log_unreadable"])]
        assert "Traceback" not in d.log()

"""A log is followed by its open handle for as long as its writer holds it, and a log written
again from its start while the daemon was down is read from its start.

`python train.py > train.log` keeps the descriptor the shell opened: logrotate without
copytruncate renames (or deletes) the file and the rank keeps writing to it. Before, a renamed or
deleted file was dropped after 30 s of quiet (an eval, a checkpoint): its failure lines were never
read. A job relaunched with `> train.log` while the daemon was down keeps the inode and,
with torchrun's fixed banner, the first 256 bytes: the daemon resumed at the old offset and never
read the new run's early failure.

Real processes: the writer is a real Python process whose stdout is the log file opened without
O_APPEND, exactly as a shell's `>` gives it; real renames and deletions; the real daemon; a real
webhook receiver counting the pages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from watchdog.logrules.tail import DRAIN_GRACE

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and inotify")]

NAN = "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
OOM = "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.00 GiB total capacity)\n"
#: Copies its stdin to its stdout line by line: the test decides when the "rank" writes.
ECHO = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"


class Rank:
    """`python -c ECHO > log`: the log opened by the launching side with O_TRUNC, no O_APPEND."""

    def __init__(self, log: Path):
        self.out = open(log, "w")  # what the shell's `>` does
        self.proc = subprocess.Popen([sys.executable, "-u", "-c", ECHO], stdin=subprocess.PIPE,
                                     stdout=self.out, text=True)
        self.out.close()  # only the rank holds it now

    def write(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def config(log: Path, hook: str, interval: str = "1s", rescan: str = "2s") -> dict:
    return {"probes": {"jitter": "0s", "logs": {
                "enabled": True, "interval": interval, "rescan": rescan, "hold": "1h",
                "sources": [{"name": "train", "paths": [str(log)]}]}},
            "alerting": {"group_window": "1s", "retry_initial": "300ms", "retry_max": "1s",
                         "channels": [{"type": "webhook", "name": "hook", "url": hook}]},
            "snapshots": {"enabled": False}}


def pages(rx, rule: str):
    return [a for r in rx.accepted() if r.json["status"] == "firing" for a in r.json["alerts"]
            if a["labels"]["alertname"] == rule]


def read_lines(d) -> float:
    return d.metrics().get('npu_watchdog_log_lines_read_total{source="train"}', 0)


def test_a_rotated_log_is_read_through_the_ranks_handle_after_any_quiet(make_daemon, tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train.log"
    rank = Rank(log)
    try:
        with Receiver("webhook") as rx:
            rank.write("iteration 1 loss 2.31\n")
            d = make_daemon(config(log, rx.url))
            wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
            # logrotate without copytruncate: rename, then `create` a new empty file.
            log.rename(logdir / "train.log.1")
            log.write_text("")
            wait_for(lambda: d.metrics().get('npu_watchdog_log_rotations_total{source="train"}', 0) >= 1,
                     what="the rotation seen")
            time.sleep(DRAIN_GRACE + 10)  # an eval: the rank is quiet longer than the drain grace
            rank.write(NAN)
            wait_for(lambda: pages(rx, "log_nan"), timeout=60, what="the NaN through the rank's handle paged")
            time.sleep(DRAIN_GRACE + 10)  # a checkpoint: quiet again
            rank.write(OOM)
            wait_for(lambda: pages(rx, "log_oom"), timeout=60, what="the OOM after a second quiet paged")
            time.sleep(3)
            assert len(pages(rx, "log_nan")) == 1 and len(pages(rx, "log_oom")) == 1, rx.accepted()
    finally:
        rank.stop()


def _held_deleted(pid: int) -> bool:
    """Whether process `pid` holds a deleted file open."""
    out = False
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out = out or os.readlink(f"/proc/{pid}/fd/{fd}").endswith(" (deleted)")
        except OSError:
            continue
    return out


def test_a_deleted_log_in_a_quiet_folder_is_read_after_any_quiet_and_let_go_with_its_writer(make_daemon, tmp_path):
    """logrotate's `rotate 0` (or compression) deletes the file; the rank writes on to it."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train.log"
    rank = Rank(log)
    try:
        with Receiver("webhook") as rx:
            rank.write("iteration 1 loss 2.31\n")
            d = make_daemon(config(log, rx.url))
            wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
            log.unlink()
            wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 0,
                     what="the deletion seen")
            time.sleep(DRAIN_GRACE + 10)  # quiet longer than the drain grace, nothing else in the folder
            rank.write(NAN)
            wait_for(lambda: pages(rx, "log_nan"), timeout=60, what="the NaN in the deleted file paged")
            time.sleep(2)
            assert len(pages(rx, "log_nan")) == 1
            assert _held_deleted(d.proc.pid)
            rank.stop()
            # The writer closed it: the deleted file is let go (its space freed), not held forever.
            wait_for(lambda: not _held_deleted(d.proc.pid), timeout=DRAIN_GRACE + 60,
                     what="the deleted log closed once its writer closed it")
    finally:
        rank.stop()


BANNER = ("*****************************************\n"
          "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
          "system being overloaded, please further tune the variable for optimal performance in your "
          "application as needed.\n"
          "*****************************************\n")
STEP = "iteration {} | consumed samples 4096 | elapsed time per iteration (ms): 812.4\n"


@pytest.mark.parametrize("evidence", ["writer started since", "content before the offset"])
def test_a_log_relaunched_with_truncation_while_the_daemon_was_down_is_read_from_its_start(
        make_daemon, tmp_path, evidence):
    """The old run and the new one share the banner (more than 256 bytes). With the new run's
    writer still running, its bytes before the old offset are made identical too, so only the
    writer's start time (after the daemon saved its offset, no O_APPEND) can tell; with the writer
    gone, only the content before the old offset can."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train.log"
    assert len(BANNER) > 256
    old = Rank(log)
    try:
        with Receiver("webhook") as rx:
            old.write(BANNER)
            d = make_daemon(config(log, rx.url))
            wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
            before = read_lines(d)
            for i in range(1, 41):
                old.write(STEP.format(i if evidence == "content before the offset" else 7))
            wait_for(lambda: read_lines(d) >= before + 40, what="the old run read")
            d.stop()
            old.stop()
            inode = log.stat().st_ino
            new = Rank(log)  # the relaunch: `> train.log`, the same inode
            try:
                new.write(BANNER)
                new.write(NAN)  # the new run's early failure, before the old offset
                for _ in range(60):
                    new.write(STEP.format(7))
                wait_for(lambda: log.read_text().count("consumed samples") == 60, what="the new run written")
                assert log.stat().st_ino == inode
                if evidence == "content before the offset":
                    new.stop()
                d.start()
                wait_for(lambda: pages(rx, "log_nan"), timeout=60, what="the new run's early NaN paged")
                time.sleep(2)
                assert len(pages(rx, "log_nan")) == 1
            finally:
                new.stop()
    finally:
        old.stop()

"""Following log files by change events (inotify), with polling as the fallback.

Real files, a real inotify instance and the real daemon. The daemon's schedule is set to an hour
so that only change events (or a left backlog) can explain a round: a line found within the test's
wait was found because of an event, not because a poll happened to come.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import wait_for
from watchdog.logrules.inotify import DirWatch, parse_events

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")

NAN = "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}\n"


def _findings(d, rule):
    return [f for f in d.status()["findings"] if f["rule"] == rule]


def _logs_config(logdir: Path, **kw):
    return {"probes": {"jitter": "0s", "logs": {
        "enabled": True, "interval": "1h", "rescan": "1h", "hold": "1h",
        "sources": [{"name": "train", "paths": [str(logdir / "*.log")]}], **kw}}}


def _following(make_daemon, tmp_path, first="start\n", **kw):
    """A daemon following `logs/train_rank0.log` (which holds `first`), returned once it does."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_text(first)
    d = make_daemon(_logs_config(logdir, **kw))
    wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
    return d, log


@linux
def test_dirwatch_reports_writes_creations_and_renames(tmp_path: Path) -> None:
    w = DirWatch.open()
    assert w is not None
    try:
        w.sync({str(tmp_path)})
        assert w.wait(0.05) is None  # nothing happened: nothing to report
        (tmp_path / "a.log").write_text("x\n")
        assert str(tmp_path / "a.log") in wait_for(lambda: w.wait(0.2), what="create event")
        with open(tmp_path / "a.log", "a") as fh:
            fh.write("y\n")
        assert str(tmp_path / "a.log") in wait_for(lambda: w.wait(0.2), what="write event")
        (tmp_path / "a.log").rename(tmp_path / "a.log.1")
        got = wait_for(lambda: w.wait(0.2), what="rename events")
        assert {str(tmp_path / "a.log"), str(tmp_path / "a.log.1")} & got
        w.sync(set())
        (tmp_path / "b.log").write_text("z\n")
        assert w.wait(0.1) is None  # no longer watched
    finally:
        w.close()


def test_parse_events_ignores_a_truncated_tail() -> None:
    import struct

    one = struct.pack("iIII", 1, 2, 0, 8) + b"a.log\0\0\0"
    assert parse_events(one + one[:10]) == ((1, 2, "a.log"),)


@linux
def test_only_changes_of_followed_or_matching_files_start_a_round(tmp_path: Path) -> None:
    from watchdog.config import Config
    from watchdog.probes.logs import LogsProbe

    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "train_rank0.log").write_text("start\n")
    cfg = Config.model_validate(_logs_config(logdir)).probes.logs
    probe = LogsProbe(cfg, str(tmp_path))
    try:
        assert probe.watch is not None and probe.interval == 3600
        probe.collect()  # the first (full) round starts watching the directory
        (logdir / "notes.txt").write_text("loss: nan\n")
        assert probe.wait_change(0.3) is False  # no pattern matches it: no round
        assert probe.wait_change(0.05) is False  # idle: nothing at all
        with open(logdir / "train_rank0.log", "a") as fh:
            fh.write(NAN)
        assert wait_for(lambda: probe.wait_change(0.5), what="change of the followed file")
        got = probe.collect()
        assert [e.rule for e in got.value.events] == ["nan_loss_value"] and not got.quiet
        (logdir / "train_rank1.log").write_text("a new rank's log\n")
        assert wait_for(lambda: probe.wait_change(0.5), what="a new matching file")
        got = probe.collect()
        assert got.value.lines_read == {"train": 1} and got.quiet  # read, nothing matched
    finally:
        probe.close()


@linux
def test_a_line_written_while_the_first_round_reads_starts_a_round(tmp_path: Path) -> None:
    """The directories are watched before a full round reads, not after: a line a rank writes
    between the read and the watch would otherwise wait for the next write or the safety rescan
    (30 s), which in a fleet put one node's HCCL timeout 30 s behind everyone else's."""
    from watchdog.config import Config
    from watchdog.probes.logs import LogsProbe

    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_text("start\n")
    probe = LogsProbe(Config.model_validate(_logs_config(logdir)).probes.logs, str(tmp_path))
    read = probe.tailer.poll

    def read_then_the_rank_writes(*args, **kw):
        out = read(*args, **kw)
        with open(log, "a") as fh:  # the writer, right after the round read the file
            fh.write(NAN)
        return out

    probe.tailer.poll = read_then_the_rank_writes
    try:
        assert not probe.collect().value.events  # the first round: the file is followed from here
        probe.tailer.poll = read
        assert wait_for(lambda: probe.wait_change(0.5), timeout=5, what="the change event of the line")
        assert [e.rule for e in probe.collect().value.events] == ["nan_loss_value"]
    finally:
        probe.close()


@linux
def test_lines_written_just_before_a_delete_or_a_rotation_are_read_at_once(tmp_path: Path) -> None:
    from watchdog.config import Config
    from watchdog.probes.logs import LogsProbe

    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_text("start\n")
    probe = LogsProbe(Config.model_validate(_logs_config(logdir)).probes.logs, str(tmp_path))
    try:
        probe.collect()
        with open(log, "a") as fh:
            fh.write(NAN)
        log.rename(logdir / "train_rank0.log.1")  # rotated away: no pattern matches the new name
        log.write_text("")
        assert wait_for(lambda: probe.wait_change(0.5), what="rotation events")
        assert [e.rule for e in probe.collect().value.events] == ["nan_loss_value"]
        with open(log, "a") as fh:
            fh.write(NAN)
        log.unlink()
        assert wait_for(lambda: probe.wait_change(0.5), what="delete event")
        assert [e.rule for e in probe.collect().value.events] == ["nan_loss_value"]
    finally:
        probe.close()


@linux
def test_a_failure_line_is_found_by_its_change_event(make_daemon, tmp_path):
    d, log = _following(make_daemon, tmp_path)
    with open(log, "a") as fh:
        fh.write(NAN)
    # The schedule says one round per hour: only the change event can explain finding it.
    wait_for(lambda: _findings(d, "log_nan"), what="log_nan from a change event")


@linux
def test_a_backlog_is_caught_up_in_back_to_back_rounds(make_daemon, tmp_path):
    d, log = _following(make_daemon, tmp_path, first="", max_bytes_per_round="64KiB", slice_size="16KiB")
    line = "iteration 1 | lm loss: 2.0 | loss scale: 65536.0 | an ordinary training line\n"
    n = (4 << 20) // len(line)  # 4 MiB: 64 rounds of 64 KiB
    with open(log, "a") as fh:
        fh.write(line * n + NAN)
    wait_for(lambda: _findings(d, "log_nan"), timeout=60, what="the failure line after the backlog")
    m = d.metrics()
    assert m['npu_watchdog_log_lines_read_total{source="train"}'] == n + 1
    assert m['npu_watchdog_probe_runs_total{probe="logs"}'] >= 64


def test_polling_follows_where_events_are_not_wanted(make_daemon, tmp_path):
    d, log = _following(make_daemon, tmp_path, follow="poll", interval="1s")
    with open(log, "a") as fh:
        fh.write(NAN)
    wait_for(lambda: _findings(d, "log_nan"), what="log_nan by polling")


@linux
@pytest.mark.parametrize("elsewhere", [False, True], ids=["same-folder", "other-folder"])
def test_a_file_renamed_away_is_followed_by_inode_through_change_events(tmp_path: Path, elsewhere: bool) -> None:
    """A writer keeps its handle across a rename rotation (no copytruncate) and writes its next
    lines to `train.log.1`, which no pattern matches. Its change events start a round: the file
    is followed by inode (the name of the daemon's open descriptor), not found at the rescan.
    Fails on the code before the fix: no event concerned the renamed file (wait_change False)."""
    from watchdog.config import Config
    from watchdog.probes.logs import LogsProbe

    logdir, archive = tmp_path / "logs", tmp_path / "archive"
    logdir.mkdir(), archive.mkdir()
    log = logdir / "train_rank0.log"
    log.write_text("start\n")
    probe = LogsProbe(Config.model_validate(_logs_config(logdir)).probes.logs, str(tmp_path))
    writer = open(log, "a", buffering=1)
    try:
        probe.collect()
        log.rename((archive if elsewhere else logdir) / "train_rank0.log.1")
        log.write_text("")
        assert wait_for(lambda: probe.wait_change(0.5), what="rotation events")
        assert not probe.collect().value.events and len(probe.tailer.draining) == 1
        while probe.wait_change(0.2):  # the round's own reads settle
            probe.collect()
        writer.write(NAN)  # through the old handle, into the renamed file
        assert wait_for(lambda: probe.wait_change(0.5), timeout=20, what="the renamed file's change event")
        assert [e.rule for e in probe.collect().value.events] == ["nan_loss_value"]
    finally:
        writer.close()
        probe.close()


@linux
def test_a_line_through_the_old_handle_after_a_rotation_pages_from_its_change_event(make_daemon, tmp_path):
    """The daemon: one scheduled round and one rescan per hour, so within the test's wait only the
    change event of the renamed file can explain the finding (before the fix it came with the
    rescan, 30 s by default). The issue's bound, found within 2 s, is asserted on the daemon's own
    clock: the finding's `since` is the start of the round that read the line, so the difference
    to the time the line was written is only the inotify wake-up and the start of that round,
    never the test's polling, HTTP or the evaluation after it (measured 0.15-0.2 s here, 0.24-0.50 s
    under load since quiet event rounds are spaced out: the follower's earlier rounds here found
    nothing)."""
    import time

    d, log = _following(make_daemon, tmp_path)
    lines = 'npu_watchdog_log_lines_read_total{source="train"}'
    with open(log, "a", buffering=1) as writer:
        log.rename(log.parent / "train_rank0.log.1")
        with open(log, "a", buffering=1) as new:
            wait_for(lambda: d.metrics().get('npu_watchdog_log_rotations_total{source="train"}', 0) >= 1,
                     what="the rotation seen")
            # Settle: a line in the new file, counted, so no round is left under way or queued
            # that would read the renamed file anyway (as the fix does on every event).
            before = d.metrics().get(lines, 0)
            new.write("settled\n")
            wait_for(lambda: d.metrics().get(lines, 0) > before, what="the settling line read")
        time.sleep(0.5)
        written_at = time.time()
        writer.write(NAN)
        found = wait_for(lambda: _findings(d, "log_nan"), timeout=60, what="log_nan from the renamed file")
    detected_in = found[0]["since"] - written_at
    print(f"line through the old handle detected {detected_in:.2f}s after it was written")
    assert -1.0 < detected_in <= 2.0, found  # the rescan (1 h) never ran; the event did


CHATTER = ("import sys, time\n"
           "end = time.monotonic() + float(sys.argv[2])\n"
           "with open(sys.argv[1], 'a', buffering=1) as fh:\n"
           "    n = 0\n"
           "    while time.monotonic() < end:\n"
           "        n += 1\n"
           "        fh.write('Training: %d/100000 [10 it/s, loss=2.1]\\n' % n)\n"
           "        time.sleep(0.05)\n")


@linux
def test_a_log_written_all_the_time_spaces_its_quiet_rounds_out_and_still_pages(make_daemon, procs, tmp_path):
    """A progress bar writing 20 lines a second: the rounds that find nothing come ever further
    apart (0.25, 0.5, 1, then every 2 s: scheduler.next_gap), not four a second; a failure line
    amid it is still found by its change event (the schedule says one round an hour)."""
    import subprocess

    d, log = _following(make_daemon, tmp_path)
    runs = 'npu_watchdog_probe_runs_total{probe="logs"}'
    before = d.metrics()[runs]
    writer = procs([sys.executable, "-c", CHATTER, str(log), "8"])
    assert writer.wait(timeout=60) == 0
    m = d.metrics()
    lines = m['npu_watchdog_log_lines_read_total{source="train"}']
    assert lines >= 100, "the writer's lines were not read"
    # Four rounds a second before: about 32 in 8 s. Spaced out: 0.25 + 0.5 + 1 + 2 + 2 + 2 s.
    assert 3 <= m[runs] - before <= 12, m[runs] - before
    chatter = procs([sys.executable, "-c", CHATTER, str(log), "30"], stdout=subprocess.DEVNULL)
    try:
        with open(log, "a") as fh:
            fh.write(NAN)
        wait_for(lambda: _findings(d, "log_nan"), timeout=20, what="log_nan amid the chatter")
    finally:
        chatter.kill()


#: A progress bar as tqdm draws it into a file (`\r` and the bar, no newline), then the line a
#: trainer prints through it (`tqdm.write`: `\r`, spaces, `\r`, the text, a newline): the bytes of
#: tqdm 4.70.1, tests/unit/test_log_progress_bars.py.
PROGRESS_BAR = ("import sys, time\n"
                "with open(sys.argv[1], 'a') as fh:\n"
                "    for i in range(3000):\n"
                "        fh.write('\\r 37%%|###7      | %d/10000 [12:01<20:22, 5.14it/s]' % i)\n"
                "        if i % 100 == 0:\n"
                "            fh.flush()\n"
                "            time.sleep(0.01)\n"
                "    fh.write('\\r' + ' ' * 52 + '\\r' + sys.argv[2] + '\\n')\n")


@linux
def test_a_nan_line_printed_through_a_progress_bar_pages(make_daemon, procs, tmp_path):
    """150 KiB of redraws since the last newline, then the NaN line: matched on what a terminal
    shows (before, on the first 64 KiB of the "line", all of it bar)."""
    d, log = _following(make_daemon, tmp_path)
    assert procs([sys.executable, "-c", PROGRESS_BAR, str(log), NAN.strip()]).wait(timeout=60) == 0
    assert log.stat().st_size > 2 * 65536
    (found,) = wait_for(lambda: _findings(d, "log_nan"), timeout=30, what="log_nan after the bar")
    # The evidence is the line as the terminal shows it, not 64 KiB of bar.
    assert found["details"]["first_line"] == NAN.strip() and found["labels"]["log_rule"] == "nan_loss_value"
    assert found["summary"] == f"loss is NaN/inf (rank 0): {NAN.strip()}"

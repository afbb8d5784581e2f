"""The tailer on real files: rotation, copytruncate, delete/re-create, partial lines, restarts."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import List, Tuple

import pytest

from tests.helpers import logged
from watchdog.logrules.tail import SourceSpec, Tailer


class Sink:
    def __init__(self) -> None:
        self.lines: List[Tuple[str, bytes]] = []

    def __call__(self, f, data: bytes, stop: int) -> None:
        for line in data[:stop].splitlines():
            self.lines.append((os.path.basename(f.path), line))

    def texts(self) -> List[bytes]:
        return [l for _, l in self.lines]


def make(tmp: Path, pattern: str = "*.log", start: str = "end", **kw) -> Tailer:
    spec = SourceSpec("train", (str(tmp / pattern),), rank_pattern=r"rank[_-]?(\d+)", start=start)
    return Tailer([spec], str(tmp / "offsets.json"), **kw)


def append(p: Path, data: bytes) -> None:
    with open(p, "ab") as fh:
        fh.write(data)


def test_first_start_reads_from_end_and_new_files_from_start(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_bytes(b"old line 1\nold line 2\n")
    t, sink = make(tmp_path), Sink()
    t.poll(sink, 1.0)
    assert sink.lines == []
    append(tmp_path / "rank0.log", b"new 1\n")
    (tmp_path / "rank1.log").write_bytes(b"born later\n")
    t.poll(sink, 2.0)
    assert sorted(sink.lines) == [("rank0.log", b"new 1"), ("rank1.log", b"born later")]
    assert {f.rank for f in t.files.values()} == {"0", "1"}
    assert t.stats["train"].files_followed == 2


def test_partial_line_is_held_until_complete(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(b"")
    t, sink = make(tmp_path), Sink()
    t.poll(sink, 1.0)
    append(p, b"complete\nhalf a li")
    t.poll(sink, 2.0)
    assert sink.texts() == [b"complete"]
    append(p, b"ne\n")
    t.poll(sink, 3.0)
    assert sink.texts() == [b"complete", b"half a line"]


def test_a_held_partial_line_is_not_read_again_until_more_is_written(tmp_path: Path, monkeypatch) -> None:
    """A progress bar redrawn with a carriage return and no newline grows one line for hours:
    each round read all of it again (up to a slice) to find no newline. Now a round reads only
    what was written after it; the line is read whole once its newline comes, and a file
    truncated under it is read from its start again."""
    from watchdog.logrules import tail as tail_module

    p = tmp_path / "rank0.log"
    p.write_bytes(b"")
    t, sink = make(tmp_path, slice_bytes=1 << 22), Sink()
    t.poll(sink, 1.0)
    bar = b"".join(b"\r %3d%%|####| %d/1000" % (i % 100, i) for i in range(20000))  # ~480 KB
    append(p, b"epoch 1\n" + bar)
    read: List[int] = []
    real = tail_module.os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        data = real(fd, n, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr(tail_module.os, "pread", counting)
    t.poll(sink, 2.0)
    assert sink.texts() == [b"epoch 1"] and sum(read) >= len(bar)
    read.clear()
    t.poll(sink, 3.0)  # nothing written: the file's first bytes (its identity) are all it reads
    assert sum(read) <= 1024
    append(p, b"\r 1%|#| 20001/1000")
    t.poll(sink, 4.0)
    assert sink.texts() == [b"epoch 1"] and sum(read) <= 1024 + 64
    append(p, b"\nloss: nan at step 20002\n")
    t.poll(sink, 5.0)
    assert sink.texts()[-1] == b"loss: nan at step 20002"
    got = sink.texts()  # (the sink splits at carriage returns too)
    assert got[-2] == b" 1%|#| 20001/1000" and b"  99%|####| 19999/1000" in got and len(got) == 20004
    assert t.files[str(p)].offset == p.stat().st_size
    append(p, b"half")
    t.poll(sink, 6.0)
    p.write_bytes(b"")  # truncated (a relaunch), then a new run writes its lines
    t.poll(sink, 7.0)
    append(p, b"new run\nhalf")
    t.poll(sink, 8.0)
    assert sink.texts()[-1] == b"new run"


def test_rename_and_create_rotation_drains_old_file(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_bytes(b"")
    t, sink = make(tmp_path, "train.log"), Sink()
    t.poll(sink, 1.0)
    append(p, b"before rotation\n")
    t.poll(sink, 2.0)
    append(p, b"written just before the rename\n")
    os.rename(p, tmp_path / "train.log.1")
    p.write_bytes(b"first line of the new file\n")
    t.poll(sink, 3.0)
    assert sink.texts() == [b"before rotation", b"written just before the rename", b"first line of the new file"]
    assert t.stats["train"].rotations_total == 1


def test_copytruncate(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_bytes(b"")
    t, sink = make(tmp_path, "train.log"), Sink()
    t.poll(sink, 1.0)
    append(p, b"a long line before the truncation happens\n")
    t.poll(sink, 2.0)
    with open(p, "r+b") as fh:
        fh.truncate(0)
    append(p, b"after\n")
    t.poll(sink, 3.0)
    assert sink.texts()[-1] == b"after"
    assert t.stats["train"].rotations_total == 1


def test_delete_and_recreate_and_missing_files(tmp_path: Path) -> None:
    t, sink = make(tmp_path, "rank*.log"), Sink()
    t.poll(sink, 1.0)  # nothing exists yet: no error
    assert t.errors == {} and t.stats["train"].files_followed == 0
    p = tmp_path / "rank2.log"
    p.write_bytes(b"one\n")
    t.poll(sink, 2.0)
    p.unlink()
    t.poll(sink, 3.0)
    assert t.stats["train"].files_followed == 0
    p.write_bytes(b"two\n")
    t.poll(sink, 4.0)
    assert sink.texts() == [b"one", b"two"]
    assert t.stats["train"].rotations_total == 1


def test_restart_continues_from_saved_offset(tmp_path: Path) -> None:
    p = tmp_path / "rank0.log"
    p.write_bytes(b"history\n")
    t, sink = make(tmp_path), Sink()
    t.poll(sink, 1.0)
    append(p, b"seen by the first daemon\n")
    t.poll(sink, 2.0)
    t.close()
    mode = stat.S_IMODE(os.stat(tmp_path / "offsets.json").st_mode)
    assert mode == 0o600
    append(p, b"written while the daemon was down\n")
    (tmp_path / "rank1.log").write_bytes(b"a file the old daemon never saw\n")
    t2, sink2 = make(tmp_path), Sink()
    t2.poll(sink2, 3.0)
    # the known file continues at its offset; the unknown one is read from its end
    assert sink2.lines == [("rank0.log", b"written while the daemon was down")]
    assert t2.files[str(p)].stream.line_no is None  # started at its end: line numbers unknown


def test_restart_after_file_was_replaced(tmp_path: Path) -> None:
    p = tmp_path / "rank0.log"
    p.write_bytes(b"x" * 300 + b"\n")
    t, sink = make(tmp_path), Sink()
    t.poll(sink, 1.0)
    t.close()
    p.unlink()
    p.write_bytes(b"y" * 400 + b"\nnew content\n")  # longer than the old offset, other first bytes
    t2, sink2 = make(tmp_path), Sink()
    t2.poll(sink2, 2.0)
    assert sink2.texts() == [b"y" * 400, b"new content"]


def test_bounded_rounds_huge_lines_and_bad_bytes(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(b"")
    t, sink = make(tmp_path, slice_bytes=64 * 1024, round_bytes=256 * 1024), Sink()
    t.poll(sink, 1.0)
    huge = b"z" * (1 << 20) + b"\n"
    append(p, huge + b"\xff\xfe\x00bad bytes\n" + b"line\n" * 1000)
    rounds = 0
    while True:
        rounds += 1
        n = t.poll(sink, 2.0 + rounds)
        assert n <= 256 * 1024
        if n == 0:
            break
    assert rounds > 4  # a 1 MiB backlog took several bounded rounds
    assert b"\xff\xfe\x00bad bytes" in sink.texts()
    assert sink.texts()[-1] == b"line" and sink.texts().count(b"line") == 1000
    assert t.stats["train"].read_lag_seconds == 0.0


def test_lines_written_through_the_old_handle_after_a_rename_are_read(tmp_path: Path) -> None:
    """A writer that keeps its handle across a rename-and-create rotation (logrotate without
    copytruncate, before the writer reopens): its later lines land in the renamed file."""
    p = tmp_path / "train.log"
    p.write_bytes(b"")
    t, sink = make(tmp_path, "train.log"), Sink()
    t.poll(sink, 1.0)
    writer = open(p, "ab", buffering=0)
    try:
        writer.write(b"before rotation\n")
        os.rename(p, tmp_path / "train.log.1")
        p.write_bytes(b"first line of the new file\n")
        t.poll(sink, 2.0)  # rotation seen: the old file is read to its current end
        writer.write(b"loss: nan written to the old handle after the rename\n")
        t.poll(sink, 3.0)
        writer.write(b"half a line on the old ha")
        t.poll(sink, 4.0)
        writer.write(b"ndle\n")
        t.poll(sink, 5.0)
    finally:
        writer.close()
    assert sink.texts() == [b"before rotation", b"first line of the new file",
                            b"loss: nan written to the old handle after the rename", b"half a line on the old handle"]
    # once the old file stays quiet for the grace period its handle is closed
    t.poll(sink, 5.0 + t.drain_grace + 1)
    assert t.draining == []


def test_a_rotated_file_renamed_to_a_matched_name_is_not_read_twice(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_bytes(b"")
    t, sink = make(tmp_path, "train.log*"), Sink()
    t.poll(sink, 1.0)
    append(p, b"one\n")
    t.poll(sink, 2.0)
    os.rename(p, tmp_path / "train.log.1")
    p.write_bytes(b"two\n")
    append(tmp_path / "train.log.1", b"late\n")
    t.poll(sink, 3.0)
    t.poll(sink, 4.0)
    assert sorted(sink.texts()) == [b"late", b"one", b"two"]


def test_a_failed_offsets_save_does_not_blind_the_tailer_and_recovers(tmp_path: Path) -> None:
    """The save path made unwritable (a directory where the temporary file goes, which stops
    root too), then repaired: reading never stops, the condition is reported and clears."""
    p = tmp_path / "rank0.log"
    p.write_bytes(b"")
    t, sink = make(tmp_path), Sink()
    t.poll(sink, 1.0)
    blocker = tmp_path / "offsets.json.tmp"
    blocker.mkdir()
    (blocker / "keep").write_bytes(b"")
    append(p, b"during the fault\n")
    t.poll(sink, 2.0)
    append(p, b"still during the fault\n")
    t.poll(sink, 3.0)
    assert sink.texts() == [b"during the fault", b"still during the fault"]
    assert t.state_error and "offsets.json" in t.state_error
    assert t.state_save_errors_total == 2
    (blocker / "keep").unlink()
    blocker.rmdir()
    append(p, b"after recovery\n")
    t.poll(sink, 4.0)
    assert sink.texts()[-1] == b"after recovery"
    assert t.state_error is None and t.errors == {}
    t2 = make(tmp_path)
    t2.load_saved()  # what a restarted daemon's first round reads
    assert t2._saved is not None and t2._saved[str(p)]["offset"] == p.stat().st_size


def test_an_unreadable_directory_is_an_error_until_it_can_be_listed(tmp_path: Path) -> None:
    """The directory of a glob is a symlink loop: listing it fails (as root too; permissions are
    covered by the daemon test, which drops root's override capabilities)."""
    t, sink = make(tmp_path / "logs"), Sink()
    t.poll(sink, 1.0)
    assert t.errors == {}  # not there yet: no error, nothing followed
    os.symlink(tmp_path / "logs", tmp_path / "logs")
    t.poll(sink, 2.0)
    assert list(t.errors) == [str(tmp_path / "logs")] and t.error_sources[str(tmp_path / "logs")] == "train"
    assert t.stats["train"].read_errors_total == 1
    t.poll(sink, 3.0)
    assert t.stats["train"].read_errors_total == 1  # counted once per episode
    (tmp_path / "logs").unlink()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank0.log").write_bytes(b"hello\n")
    t.poll(sink, 4.0)
    assert t.errors == {} and sink.texts() == [b"hello"]


def test_offsets_are_written_every_round_and_fsynced_at_most_once_a_minute(tmp_path: Path, monkeypatch) -> None:
    """Counted: every round's offsets reach the file (a daemon killed without `close` continues
    where it stopped), but only the first save, one SYNC_SECONDS later, and `close` fsync it."""
    from watchdog.logrules import tail as tail_mod

    syncs: List[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(tail_mod.statefiles.os, "fsync", lambda fd: syncs.append(fd) or real_fsync(fd))
    clock = [100.0]
    monkeypatch.setattr(tail_mod.time, "monotonic", lambda: clock[0])
    p = tmp_path / "rank0.log"
    p.write_bytes(b"history\n")
    t, sink = make(tmp_path), Sink()
    t.poll(sink, 1.0)
    assert len(syncs) == 1
    for i in range(5):
        clock[0] += 10
        append(p, b"line %d\n" % i)
        t.poll(sink, 2.0 + i)
    assert len(syncs) == 1, "rounds within a minute are written, not fsynced"
    # Killed here (no close): a new tailer continues after the last line read.
    append(p, b"after the kill\n")
    t2, sink2 = make(tmp_path), Sink()
    t2.poll(sink2, 10.0)
    assert sink2.texts() == [b"after the kill"]
    clock[0] += tail_mod.SYNC_SECONDS
    append(p, b"a minute later\n")
    t.poll(sink, 11.0)
    assert len(syncs) == 3  # (t2's first save, then t's minute)
    t.close()
    assert len(syncs) == 4


def test_a_plain_path_that_loops_stays_an_error_beside_a_readable_sibling(tmp_path: Path) -> None:
    """Two plain paths in one folder (discovery follows each rank's own file): one becomes a
    symlink loop. Its error was kept under the folder's name, which the readable sibling cleared
    in the same round: both log lines four times a second, and the loop never stayed counted."""
    (tmp_path / "rank0.log").write_bytes(b"a\n")
    (tmp_path / "rank1.log").write_bytes(b"b\n")
    spec = SourceSpec("train", (str(tmp_path / "rank0.log"), str(tmp_path / "rank1.log")),
                      rank_pattern=r"rank[_-]?(\d+)", start="end")
    t, sink = Tailer([spec], str(tmp_path / "offsets.json")), Sink()
    t.poll(sink, 1.0)
    (tmp_path / "rank0.log").unlink()
    os.symlink(tmp_path / "rank0.log", tmp_path / "rank0.log")
    with logged("watchdog.logrules.tail") as records:
        for i in range(5):
            t.poll(sink, 2.0 + i)
    loop = str(tmp_path / "rank0.log")
    assert list(t.errors) == [loop] and t.error_sources[loop] == "train"
    assert t.stats["train"].read_errors_total == 1
    said = [r.getMessage() for r in records if "rank0.log" in r.getMessage()]
    assert len(said) == 1 and "cannot read log path" in said[0], said


def test_a_sparse_hole_is_skipped_not_read(tmp_path: Path) -> None:
    """A copytruncate under a writer that does not append leaves a hole as large as the log was
    before the writer's next line: a gigabyte of zeros that took minutes of 64 MiB rounds to read
    while the line after it (a NaN) waited. The hole is skipped; the line is read in one round."""
    probe = tmp_path / "probe"
    with open(probe, "wb") as fh:
        fh.truncate(1 << 20)
        fh.seek(0, os.SEEK_END)
        fh.write(b"x")
    fd = os.open(probe, os.O_RDONLY)
    try:
        reports_holes = os.lseek(fd, 0, getattr(os, "SEEK_DATA", 0)) > 0
    except OSError:
        reports_holes = False
    finally:
        os.close(fd)
        probe.unlink()
    if not reports_holes:
        pytest.skip("this filesystem does not report holes (SEEK_DATA): everything is data there")
    log_path = tmp_path / "rank0.log"
    log_path.write_bytes(b"step 1\n")
    t, sink = make(tmp_path, start="start", round_bytes=1 << 20, slice_bytes=1 << 16), Sink()
    t.poll(sink, 1.0)
    assert sink.texts() == [b"step 1"]
    with open(log_path, "r+b") as fh:
        fh.truncate(7 + (1 << 30))  # a 1 GiB hole after the first line
        fh.seek(0, os.SEEK_END)
        fh.write(b"loss: nan at step 2\n")
    t.poll(sink, 2.0)
    assert sink.texts()[-1].endswith(b"loss: nan at step 2")
    assert t.files[str(log_path)].offset == log_path.stat().st_size

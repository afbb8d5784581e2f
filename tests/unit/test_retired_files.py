"""A relaunch appending to log files the tailer no longer follows (`watchdog.logrules.retired`),
and a file first seen after the first round that was last written before its job started."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Dict, List, Optional

from watchdog.logrules import retired
from watchdog.logrules.tail import SourceSpec, Tailer


class Sink:
    def __init__(self) -> None:
        self.lines: List[bytes] = []

    def __call__(self, f, data: bytes, stop: int) -> None:
        self.lines.extend(data[:stop].splitlines())


def spec(*paths: Path, start_from: Optional[Dict[Path, int]] = None) -> SourceSpec:
    return SourceSpec("train", tuple(str(p) for p in paths), start="end",
                      path_labels=tuple((str(p), "job", "0") for p in paths),
                      path_from=tuple((str(p), at) for p, at in (start_from or {}).items()))


def append(p: Path, data: bytes) -> None:
    with open(p, "ab") as fh:
        fh.write(data)


def _forget_and_drain(t: Tailer, sink: Sink, now: float) -> None:
    t.set_sources([])  # the job was forgotten (discovery.forget_after)
    t.poll(sink, now)
    t.poll(sink, now + t.drain_grace + 1)  # its handle drained and closed


def test_a_relaunch_appending_to_a_forgotten_file_is_read_from_where_reading_stopped(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    t, sink = Tailer([spec(log)], str(tmp_path / "offsets.json")), Sink()
    t.poll(sink, 1.0)  # first round: nothing yet
    log.write_bytes(b"step 1\nRuntimeError: NPU out of memory\n")
    t.poll(sink, 2.0)
    assert sink.lines == [b"step 1", b"RuntimeError: NPU out of memory"]
    _forget_and_drain(t, sink, 3.0)
    assert t.files == {} and str(log) in t.retired.records
    append(log, b"relaunched: step 1\n")
    sink.lines.clear()
    t.set_sources([spec(log)])
    t.poll(sink, 100.0)
    assert sink.lines == [b"relaunched: step 1"]  # not the previous run's OOM
    assert t.stats["train"].rotations_total == 0


def test_the_position_survives_a_daemon_restart_and_a_rewrite_from_the_start_is_read_again(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    t, sink = Tailer([spec(a, b)], str(tmp_path / "offsets.json")), Sink()
    t.poll(sink, 1.0)
    a.write_bytes(b"torchrun banner\nold run: HCCL timeout\n")
    b.write_bytes(b"torchrun banner\nold run: HCCL timeout\n")
    t.poll(sink, 2.0)
    _forget_and_drain(t, sink, 3.0)
    t.close()
    mode = stat.S_IMODE(os.stat(tmp_path / retired.FILE_NAME).st_mode)
    assert mode == 0o600
    append(a, b"new run appends\n")
    with open(b, "r+b") as fh:  # `> b.log`: the same first bytes, then this run's own lines
        fh.write(b"torchrun banner\nnew run from the start, longer than before\n")
    t2, sink2 = Tailer([], str(tmp_path / "offsets.json")), Sink()
    t2.poll(sink2, 10.0)
    t2.set_sources([spec(a, b)])
    t2.poll(sink2, 11.0)
    assert sorted(sink2.lines) == [b"new run appends", b"new run from the start, longer than before",
                                   b"torchrun banner"]


def test_a_file_whose_job_begins_after_an_earlier_run_is_read_from_there(tmp_path: Path) -> None:
    """`path_from` (discovery's first sight of a file an earlier run wrote): read from there, at a
    line's start; a file without it from its start."""
    old, fresh = tmp_path / "old.log", tmp_path / "fresh.log"
    old.write_bytes(b"yesterday: RuntimeError: NPU out of memory\nhalf a line of yesterday")
    t, sink = Tailer([], str(tmp_path / "offsets.json")), Sink()
    t.poll(sink, 1.0)
    fresh.write_bytes(b"this run's first line\n")
    append(old, b" and this run's first line\n")
    t.set_sources([spec(old, fresh, start_from={old: len(b"yesterday: RuntimeError: NPU out of memory\nhalf a")})])
    t.poll(sink, 2.0)
    assert sorted(sink.lines) == [b"half a line of yesterday and this run's first line", b"this run's first line"]


def test_earlier_run_ends_and_discoverys_first_sight(tmp_path: Path) -> None:
    """Where a job's lines begin in a file: its size when last written more than the margin
    before the job started (now, or when discovery first listed it), else 0."""
    from watchdog.discovery.feed import DiscoveryFeed, scan_options
    from watchdog.config.load import load_config_text
    from watchdog.host.rankfiles import BEFORE_START_MARGIN, earlier_run_ends

    log = tmp_path / "rank0.log"
    log.write_bytes(b"yesterday: RuntimeError: NPU out of memory\n")
    day = time.time() - 86400
    os.utime(log, (day, day))
    size = log.stat().st_size
    assert earlier_run_ends(str(log), time.time()) == size
    assert earlier_run_ends(str(log), day + BEFORE_START_MARGIN / 2) == 0  # within the margin
    assert earlier_run_ends(str(log), None) == 0 and earlier_run_ends(str(tmp_path / "none"), time.time()) == 0
    feed = DiscoveryFeed(scan_options(load_config_text("{}")))
    feed._first_sight[str(log)] = (log.stat().st_dev, log.stat().st_ino, size, day)  # as a scan records it
    append(log, b"this run's first line, written before the job was tracked\n")
    assert earlier_run_ends(str(log), time.time() - 5) == 0  # written since: the file alone cannot tell
    assert feed.run_start(str(log), time.time() - 5) == size  # its first sight can
    assert feed.run_start(str(log), day + 10) == 0
    log.write_bytes(b"x")  # shorter now: rewritten
    assert feed.run_start(str(log), time.time() - 5) == 0


def test_the_memory_is_bounded_and_a_damaged_one_is_set_aside(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(retired, "MAX_RECORDS", 3)
    mem = retired.RetiredFiles(str(tmp_path / retired.FILE_NAME))
    rec = {"dev": 1, "ino": 2, "offset": 3, "fp_len": 0, "tail_len": 0, "fp": ""}
    for i in range(5):
        mem.retire(f"/l/{i}.log", rec, now=100.0 + i)
    assert list(mem.records) == ["/l/2.log", "/l/3.log", "/l/4.log"]
    mem.retire("/l/5.log", rec, now=100.0 + retired.KEEP_SECONDS + 3.5)
    assert list(mem.records) == ["/l/4.log", "/l/5.log"]  # older than KEEP_SECONDS: dropped
    mem.save()
    assert json.loads((tmp_path / retired.FILE_NAME).read_text())["files"].keys() == {"/l/4.log", "/l/5.log"}
    (tmp_path / retired.FILE_NAME).write_bytes(b"\x00garbage")
    damaged = retired.RetiredFiles(str(tmp_path / retired.FILE_NAME))
    assert damaged.take("/l/4.log") is None
    assert [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    os.mkfifo(tmp_path / "fifo.json")
    assert retired.RetiredFiles(str(tmp_path / "fifo.json")).take("/x") is None  # no hang on a FIFO


def test_a_large_or_odd_memory_is_cut_to_size_at_load_and_bad_records_are_dropped(tmp_path: Path) -> None:
    """Cut once at load, in one pass (deleting from the front of a large dict in a loop is
    quadratic); negative numbers, non-finite or future times dropped."""
    now = time.time()
    rec = {"dev": 1, "ino": 2, "offset": 3, "fp_len": 0, "tail_len": 0, "fp": "", "at": now - 10}
    files = {f"/l/{i}.log": dict(rec, at=now - 10 - i * 1e-3) for i in range(50000)}
    files["/l/neg.log"] = dict(rec, offset=-5)
    files["/l/nan.log"] = dict(rec, at=float("nan"))
    files["/l/future.log"] = dict(rec, at=now + 30 * 86400)
    path = tmp_path / retired.FILE_NAME
    path.write_text(json.dumps({"version": retired.VERSION, "files": files}))
    mem = retired.RetiredFiles(str(path))
    mem.load()
    assert len(mem.records) == retired.MAX_RECORDS  # cut at load, the newest kept
    mem.retire("/l/new.log", rec)
    assert len(mem.records) == retired.MAX_RECORDS and "/l/new.log" in mem.records
    assert not {"/l/neg.log", "/l/nan.log", "/l/future.log"} & set(mem.records)


def test_an_offsets_file_with_a_negative_offset_is_set_aside_not_read_at_minus_five(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_bytes(b"step 1\n")
    st = log.stat()
    doc = {"version": 1, "files": {str(log): {"source": "train", "dev": st.st_dev, "ino": st.st_ino, "offset": -5,
                                               "fp": "", "fp_len": 0, "tail_len": 0}}}
    (tmp_path / "offsets.json").write_text(json.dumps(doc))
    t, sink = Tailer([spec(log)], str(tmp_path / "offsets.json")), Sink()
    t.poll(sink, 1.0)
    append(log, b"RuntimeError: NPU out of memory\n")
    t.poll(sink, 2.0)
    assert sink.lines[-1] == b"RuntimeError: NPU out of memory" and t.errors == {}
    assert [p for p in tmp_path.iterdir() if p.name.startswith("offsets.json.corrupt-")]

"""A retired log file (watchdog.logrules.retired) written again from its start by a relaunch with
`>`: a real writer process, started after the file retired, holding it without O_APPEND."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from typing import List

from watchdog.logrules.tail import SourceSpec, Tailer


class Sink:
    def __init__(self) -> None:
        self.lines: List[bytes] = []

    def __call__(self, f, data: bytes, stop: int) -> None:
        self.lines.extend(data[:stop].splitlines())


def spec(log: Path) -> SourceSpec:
    return SourceSpec("train", (str(log),), start="end", path_labels=((str(log), "job", "0"),))


def _forget_and_drain(t: Tailer, sink: Sink, now: float) -> None:
    t.set_sources([])  # the job was forgotten (discovery.forget_after); its handle drains, closes
    t.poll(sink, now)
    t.poll(sink, now + t.drain_grace + 1)


def test_a_truncating_relaunch_that_wrote_the_same_bytes_is_read_from_its_start(tmp_path: Path) -> None:
    """`python train.py > rank0.log` of a run that fails the same way each time writes the same
    bytes up to where reading stopped; its writer (started after the file retired, no O_APPEND)
    says it was written from the start, so it is read again, not resumed."""
    log = tmp_path / "rank0.log"
    run = (b"[banner] torch_npu | gbs=1024 mbs=4 tp=8 pp=4\n" * 6
           + b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n")
    t, sink = Tailer([spec(log)], str(tmp_path / "offsets.json")), Sink()
    t.poll(sink, 1.0)
    log.write_bytes(run)
    t.poll(sink, 2.0)
    _forget_and_drain(t, sink, 3.0)
    # A process's start time is known to about a second (the boot time /proc gives is whole
    # seconds); a relaunch comes minutes after its file retired (`forget_after` after the job).
    time.sleep(1.5)
    code = f"import sys,time; sys.stdout.buffer.write({run!r}); sys.stdout.flush(); time.sleep(60)"
    with open(log, "wb") as out:
        writer = subprocess.Popen([sys.executable, "-c", code], stdout=out)
    try:
        deadline = time.monotonic() + 30
        while log.stat().st_size < len(run) and time.monotonic() < deadline:
            time.sleep(0.05)
        sink.lines.clear()
        t.set_sources([spec(log)])
        t.poll(sink, 100.0)
    finally:
        writer.kill()
        writer.wait()
    assert sink.lines.count(b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB") == 1, sink.lines


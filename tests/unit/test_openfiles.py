"""Open-file evidence read from a /proc tree (a stand-in tree of real files and links here; the
daemon tests run it on the real /proc): who writes a file, with which flags, since when."""

from __future__ import annotations

import os
from pathlib import Path

from watchdog.host import openfiles

BOOT = 1_700_000_000


def _proc(tmp: Path, pid: int, start_ticks: int, fds: dict) -> None:
    """/proc/<pid> with stat (start time in ticks) and fd/N links with their fdinfo flags."""
    d = tmp / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "fdinfo").mkdir()
    fields = ["S", "1", "1", "1", "0", "-1", "0"] + ["0"] * 12 + [str(start_ticks)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} (python3) " + " ".join(fields) + "\n")
    for fd, (target, flags, ino) in fds.items():
        os.symlink(target, d / "fd" / str(fd))
        (d / "fdinfo" / str(fd)).write_text(f"pos:\t0\nflags:\t{flags}\nmnt_id:\t27\nino:\t{ino}\n")


def test_writers_by_link_ident_flags_and_start(tmp_path):
    (tmp_path / "stat").write_text(f"cpu 0 0 0\nbtime {BOOT}\n")
    log = "/data/job/train.log.1"
    _proc(tmp_path, 101, 100 * 100, {1: (log, "0100001", 555), 2: (log, "0100002", 555), 3: (log, "0100000", 555)})
    _proc(tmp_path, 102, 200 * 100, {1: (log, "0102001", 555)})          # `>>`: O_APPEND
    _proc(tmp_path, 103, 300 * 100, {1: (log, "0100001", 999)})          # same name, another inode
    _proc(tmp_path, 104, 400 * 100, {5: ("/data/job/other.log", "01", 7)})
    got = openfiles.writers({log: (27, 555)}, proc=str(tmp_path))
    assert sorted((w.pid, w.appends) for w in got[log]) == [(101, False), (101, False), (102, True)]
    assert {w.pid: w.started_at for w in got[log]} == {101: BOOT + 100, 102: BOOT + 200}
    # The relaunch question: only processes started after the save are looked at.
    later = openfiles.writers({log: None}, started_after=BOOT + 250, proc=str(tmp_path))
    assert [w.pid for w in later[log]] == [103]
    assert openfiles.writers({}, proc=str(tmp_path)) == {}
    assert openfiles.writers({log: (27, 555)}, uids={12345}, proc=str(tmp_path)) == {}


def test_a_descriptor_without_fdinfo_is_no_writer(tmp_path):
    (tmp_path / "stat").write_text(f"btime {BOOT}\n")
    _proc(tmp_path, 7, 100, {})
    os.symlink("/x.log", tmp_path / "7" / "fd" / "4")  # its fdinfo is gone (the fd closed meanwhile)
    assert openfiles.writers({"/x.log": None}, proc=str(tmp_path)) == {}

"""The process table's age test in whole clock ticks: /proc/uptime has the ticks' precision, a
float product of it does not. A process started in the tick of the scan once read as younger than
0 s (38272.38 * 100 = 3827237.9999...) and, with `settled=0`, stayed unsettled (its `stat` read
at every scan) for as long as the scans fell in that tick. A /proc made of plain files here."""

from __future__ import annotations

from pathlib import Path

from watchdog.discovery import procfs

KEYS = frozenset({"RANK"})


def fake_proc(root: Path, uptime: str, start_ticks: int) -> str:
    root.mkdir()
    (root / "uptime").write_text(f"{uptime} 100.00\n")
    p = root / "4242"
    p.mkdir()
    fields = ["S", "1", "4242", "4242", "0", "-1", "4194304"] + ["0"] * 12 + [str(start_ticks)] + ["0"] * 30
    (p / "stat").write_text("4242 (sleep) " + " ".join(fields) + "\n")
    (p / "cmdline").write_bytes(b"sleep\x00100\x00")
    (p / "environ").write_bytes(b"PATH=/usr/bin\x00")
    return str(root)


def test_a_process_started_in_the_scans_own_tick_is_settled_with_settled_zero(tmp_path):
    proc = fake_proc(tmp_path / "proc", "38272.38", 3827238)
    table = procfs.ProcTable(settled=0.0, full_every=0, rotate=3)
    assert 4242 in table.read(KEYS, proc)
    assert table._known[4242][2] is True


def test_a_process_one_tick_younger_than_settled_is_not(tmp_path):
    proc = fake_proc(tmp_path / "proc", "38272.38", 3827238)
    table = procfs.ProcTable(settled=0.01, full_every=0, rotate=3)
    table.read(KEYS, proc)
    assert table._known[4242][2] is False

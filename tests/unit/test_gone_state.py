"""The lost ranks kept across a restart (watchdog.probes.gonestate): taken back only for the same
run of a job, once; a damaged or foreign file restores nothing and never raises."""

from __future__ import annotations

import json
import os

from watchdog.observations import ProcessInfo
from watchdog.probes.gonestate import STATE_FILE, GoneRanks


def info(pid: int, rank: int, created: float = 1000.0) -> ProcessInfo:
    return ProcessInfo(pid=pid, rank=rank, state="sleeping", create_time=created, cpu_seconds=1.0, cpu_delta=0.1,
                       rss_bytes=1, threads=2, cmdline=("python", "train.py"), name="python", job="j", npu=3)


def saved(tmp_path, peers=((11, 1000.0), (12, 1000.5))):
    g = GoneRanks(str(tmp_path))
    g.save({"j": (set(peers) | {(13, 1001.0)}, {2: 5000.0})}, {("j", 2): info(13, 2, 1001.0)})
    assert (os.stat(tmp_path / STATE_FILE).st_mode & 0o077) == 0
    return GoneRanks(str(tmp_path))


def test_the_same_run_takes_its_lost_rank_back_once(tmp_path):
    g = saved(tmp_path)
    # A start time read a second off (the boot time moved) is still the same process.
    (got,) = g.take("j", [(11, 1001.0), (14, 2000.0)])
    rank, left_at, rec = got
    assert (rank, left_at, rec.pid, rec.npu, rec.cmdline) == (2, 5000.0, 13, 3, ("python", "train.py"))
    assert g.take("j", [(11, 1000.0)]) == []  # once


def test_another_run_under_the_same_name_takes_nothing(tmp_path):
    g = saved(tmp_path)
    assert g.take("j", [(11, 1500.0), (99, 1000.0)]) == []  # pid reused later; another pid
    assert g.take("other", [(98, 1000.0)]) == []


def test_the_same_run_under_another_name_takes_its_lost_rank_back(tmp_path):
    """The processes decide, not the name (a job named anew after a restart keeps its lost ranks)."""
    (got,) = saved(tmp_path).take("renamed", [(12, 1000.5)])
    assert got[0] == 2 and got[2].pid == 13


def test_a_damaged_or_foreign_file_restores_nothing(tmp_path):
    for text in ("{not json", json.dumps({"version": 1, "data": {"jobs": {"j": {"peers": [[11, "x"]], "gone": [7]}}}}),
                 json.dumps({"version": 1, "data": {"jobs": {"j": {"peers": [[11, 1000.0]],
                                                                    "gone": [{"left_at": 1.0, "info": {"pid": -1}}]}}}}),
                 json.dumps({"version": 99, "data": {}}), json.dumps([1, 2])):
        (tmp_path / STATE_FILE).write_text(text)
        assert GoneRanks(str(tmp_path)).take("j", [(11, 1000.0)]) == []


def test_nothing_changed_writes_nothing_and_a_failed_save_is_said(tmp_path):
    g = GoneRanks(str(tmp_path))
    g.save({}, {})
    first = os.stat(tmp_path / STATE_FILE).st_mtime_ns
    g.save({}, {})
    assert os.stat(tmp_path / STATE_FILE).st_mtime_ns == first
    blocked = GoneRanks(str(tmp_path / "no" / "such"))
    blocked.save({"j": ({(11, 1.0)}, {2: 5.0})}, {("j", 2): info(13, 2)})
    assert blocked.error and "cannot save" in blocked.error

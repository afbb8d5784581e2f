"""The lost ranks are taken back by the rank processes, not only by the job's name: the same run
under the name a restarted discovery gives it (`run-<t>` before, `train-<t'>` after a launch script
left) gets its lost rank back."""
from __future__ import annotations

from watchdog.observations import ProcessInfo
from watchdog.probes.gonestate import GoneRanks


def test_the_same_run_under_the_name_a_restarted_discovery_gives_it_takes_its_lost_rank_back(tmp_path):
    lost = ProcessInfo(pid=13, rank=2, state="sleeping", create_time=1001.0, cpu_seconds=1.0, cpu_delta=0.1,
                       rss_bytes=1, threads=2, cmdline=("python", "train.py"), name="python", job="run-x", npu=2)
    GoneRanks(str(tmp_path)).save({"run-20260101-000000": ({(11, 1000.0), (12, 1000.0), (13, 1001.0)}, {2: 5000.0})},
                                  {("run-20260101-000000", 2): lost})
    got = GoneRanks(str(tmp_path)).take("train-20260101-000001", [(11, 1000.0), (12, 1000.0)])
    assert [r for r, _, _ in got] == [2]

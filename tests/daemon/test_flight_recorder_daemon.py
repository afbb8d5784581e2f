"""The flight recorder end to end: a real rank writes its ring, the real daemon shows the tail in
/api/status, the rank is SIGKILLed mid-run, and the snapshot bundle holds its last steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile

import pytest

from tests.helpers import REPO, wait_for

PKG_DIR = REPO / "contrib" / "heartbeat"

#: A rank stepping every 10 ms; after each step (ring first) it appends the step to a log file.
RANK = r"""
import sys, time
from npu_watchdog_heartbeat import Heartbeat
hb = Heartbeat(min_interval=1.0, ring_capacity=64, seed=7)
hb.phase_now("train")
log = open(sys.argv[1], "a", buffering=1)
step = 0
while True:
    step += 1
    hb.beat(step=step, loss=1.0 / step, lr=3e-4, tokens_per_s=1000.0)
    log.write(f"{step}\n")
    time.sleep(0.01)
"""


@pytest.fixture
def ranks():
    """Rank processes started by the test; every one is killed at the end, whatever happened."""
    started = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _member(archive, suffix):
    with tarfile.open(archive) as tar:
        names = [n for n in tar.getnames() if n.endswith(suffix)]
        assert names, f"no member ending {suffix} in {tar.getnames()}"
        return tar.extractfile(names[0]).read()


def test_sigkilled_rank_leaves_its_last_steps_in_the_snapshot(tmp_path, make_daemon, ranks):
    hb_dir, snaps, steps_log = tmp_path / "hb", tmp_path / "snaps", tmp_path / "steps.log"
    hb_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(PKG_DIR), "NPU_WATCHDOG_HEARTBEAT": f"{hb_dir}/", "RANK": "5"}
    rank = subprocess.Popen([sys.executable, "-c", RANK, str(steps_log)], env=env, cwd=str(tmp_path))
    peer = subprocess.Popen([sys.executable, "-c", RANK, str(tmp_path / "peer.log")], env={**env, "RANK": "6"},
                            cwd=str(tmp_path))
    ranks += [rank, peer]
    try:
        d = make_daemon({
            "paths": {"state_dir": str(tmp_path / "state"), "snapshot_dir": str(snaps)},
            # A broad glob: it also matches the ring, which must not be read as a heartbeat.
            "probes": {"heartbeat": {"enabled": True, "interval": "300ms", "paths": [f"{hb_dir}/*"],
                                     "stale_after": {"train": "2s"}}},
            "snapshots": {"enabled": True, "min_free_space": "1MiB", "budget": "10s", "dmesg_lines": 0,
                          "rules": {"heartbeat_stale": {"enabled": True}}},
        })
        # While the rank runs, /api/status shows the newest steps of its ring.
        tail = wait_for(lambda: [t for t in d.status()["flight_recorder"] if t["rank"] == 5
                                 and len(t["records"]) == 5 and t["records"][-1]["step"] > 50],
                        timeout=30, what="the ring tail in /api/status")[0]
        assert tail["path"] == str(hb_dir / "rank5.json") and tail["error"] is None
        steps = [r["step"] for r in tail["records"]]
        assert steps == list(range(steps[0], steps[0] + 5))
        # What /metrics exports anyway, not every field of the rank's file (the seed stays in snapshots).
        assert tail["records"][-1]["phase"] == "train" and "seed" not in tail["records"][-1]
        # Every rank shows: its own file, step, loss, throughput and phase (the ring itself is no rank).
        wait_for(lambda: sorted(t["rank"] for t in d.status()["flight_recorder"]) == [5, 6], what="both rings")
        hb_probe = next(p for p in d.status()["probes"] if p["name"] == "heartbeat")
        assert hb_probe["last_result"].startswith("2/2 heartbeat files"), hb_probe   # rings are not heartbeats
        # /metrics shows what the last evaluation computed, which may trail the probe by a round.
        wanted = [(name, label) for label in ('rank="5"', 'rank="6"')
                  for name in ("npu_watchdog_heartbeat_step", "npu_watchdog_heartbeat_loss",
                               "npu_watchdog_heartbeat_tokens_per_second", "npu_watchdog_heartbeat_phase")]

        def missing():
            lines = d.metrics_text().splitlines()
            return [w for w in wanted if not any(ln.startswith(w[0]) and w[1] in ln for ln in lines)]
        wait_for(lambda: not missing(), what="step, loss, throughput and phase of both ranks in /metrics")
    finally:
        rank.send_signal(signal.SIGKILL)
        rank.wait()
    last_logged = int(steps_log.read_text().split()[-1])
    beat = json.loads((hb_dir / "rank5.json").read_text())
    archive = wait_for(lambda: sorted(snaps.glob("*heartbeat_stale.tar.gz")), timeout=60,
                       what="a snapshot of the stale heartbeat")[0]
    decoded = json.loads(_member(archive, "rank5.json.ring.json"))
    records = decoded["records"]
    newest = records[-1]["step"]
    # The ring holds every step up to the last one the rank reached (the log line of the very
    # last step may not have been written before the kill), far past the throttled heartbeat.
    assert newest in (last_logged, last_logged + 1) and newest >= beat["step"]
    # The ring keeps the newest 64 steps; a loaded machine may kill the rank before it made 64.
    assert [r["step"] for r in records] == list(range(max(1, newest - 63), newest + 1))
    assert decoded["header"]["rank"] == 5 and decoded["header"]["capacity"] == 64 and decoded["torn_records"] == 0
    raw = _member(archive, "rank5.json.ring")
    assert raw[:8] == b"NPUWDFR\x00" and len(raw) == 64 + 64 * 96
    manifest = json.loads(_member(archive, "manifest.json"))
    item = next(i for i in manifest["items"] if i["name"] == "flight-recorder")
    assert item["status"] == "ok", item
    # The live peer's ring is in the bundle too.
    peer_records = json.loads(_member(archive, "rank6.json.ring.json"))["records"]
    assert len(peer_records) == 64 and peer_records[-1]["step"] > newest

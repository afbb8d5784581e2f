"""Detector state that must survive a daemon restart: each rank's last step change (the stall
rule's last-progress time) and the log probe's active matches and progress times, saved next to
the offsets with atomic writes and read back forgivingly."""

from __future__ import annotations

import json
import os
import time

from watchdog.config.load import load_config_text
from watchdog.probes.heartbeat import PROGRESS_FILE, HeartbeatProbe
from watchdog.probes.logs import OFFSETS_FILE, LogsProbe


def _hb_probe(tmp_path):
    cfg = load_config_text(f"probes: {{heartbeat: {{enabled: true, paths: ['{tmp_path}/hb/rank*.json']}}}}")
    return HeartbeatProbe(cfg.probes.heartbeat, str(tmp_path / "state"))


def test_a_ranks_last_step_change_survives_a_restart(tmp_path):
    (tmp_path / "hb").mkdir()
    (tmp_path / "state").mkdir()
    hb = tmp_path / "hb" / "rank0.json"
    old = time.time() - 600
    hb.write_text(json.dumps({"step": 7, "phase": "train", "time": old}))
    first = _hb_probe(tmp_path).collect().value.readings[0]
    assert first.step_changed_at == old
    assert os.stat(tmp_path / "state" / PROGRESS_FILE).st_mode & 0o077 == 0
    # The daemon restarts; the rank is still at step 7 and keeps rewriting its heartbeat.
    hb.write_text(json.dumps({"step": 7, "phase": "train", "time": time.time()}))
    again = _hb_probe(tmp_path).collect().value.readings[0]
    assert again.step_changed_at == old, "the last progress is from before the restart, not now"
    # A damaged file is ignored, never fatal.
    (tmp_path / "state" / PROGRESS_FILE).write_text("{not json")
    assert _hb_probe(tmp_path).collect().value.readings[0].step == 7


def _logs_probe(tmp_path, hold="30m"):
    cfg = load_config_text(
        f"probes: {{logs: {{enabled: true, hold: {hold}, sources: [{{name: train, paths: ['{tmp_path}/rank*.log']}}]}}}}")
    return LogsProbe(cfg.probes.logs, str(tmp_path / "state"))


def test_active_log_matches_and_progress_survive_a_restart(tmp_path):
    (tmp_path / "state").mkdir()
    log = tmp_path / "rank0.log"
    log.write_text("")
    p = _logs_probe(tmp_path)
    p.collect()  # starts following at the end
    with open(log, "a") as f:
        f.write(" iteration      120/  100000 | lm loss: 2.31E+00 |\n")
        f.write("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity)\n")
    obs = p.collect().value
    assert [a.category for a in obs.active] == ["oom"] and "train" in obs.progress_at
    p.close()
    doc = json.loads((tmp_path / "state" / OFFSETS_FILE).read_text())
    assert doc["extra"]["active"] and doc["extra"]["progress_at"]
    q = _logs_probe(tmp_path)  # the restarted daemon: the lines lie before the saved offset
    obs2 = q.collect().value
    assert [(a.category, a.first_at, a.count) for a in obs2.active] == [(a.category, a.first_at, a.count)
                                                                       for a in obs.active]
    assert obs2.progress_at == obs.progress_at
    q.close()

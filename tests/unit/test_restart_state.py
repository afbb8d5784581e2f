"""Detector state that must survive a daemon restart: each rank's last step change (the stall
rule's last-progress time) and the log probe's active matches and progress times, saved next to
the offsets with atomic writes and read back forgivingly."""

from __future__ import annotations

import json
import os
import time

from watchdog.config.load import load_config_text
from watchdog.probes.heartbeat import PROGRESS_FILE, HeartbeatProbe
from watchdog.probes.logs import OFFSETS_FILE
from tests.probe_kit import following_logs_probe, logs_probe


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


def test_progress_is_saved_at_most_once_a_minute_while_steps_advance(tmp_path, monkeypatch):
    """Counted: steps advancing every round rewrite (and fsync) the progress file once, then not
    until PROGRESS_SAVE_SECONDS pass, unless a heartbeat file comes or goes; a shutdown saves."""
    from watchdog.probes import heartbeat as hb_mod

    writes = []
    real = hb_mod.write_json
    monkeypatch.setattr(hb_mod, "write_json", lambda path, doc: writes.append(doc) or real(path, doc))
    clock = [1000.0]
    monkeypatch.setattr(hb_mod.time, "monotonic", lambda: clock[0])
    (tmp_path / "hb").mkdir()
    (tmp_path / "state").mkdir()
    probe = _hb_probe(tmp_path)
    beat = lambda rank, step: (tmp_path / "hb" / f"rank{rank}.json").write_text(  # noqa: E731
        json.dumps({"step": step, "phase": "train", "time": time.time()}))
    beat(0, 1)
    probe.collect()
    assert len(writes) == 1
    for step in range(2, 6):
        clock[0] += 10
        beat(0, step)
        probe.collect()
    assert len(writes) == 1, "advancing steps within a minute: no rewrite"
    beat(1, 1)
    probe.collect()
    assert len(writes) == 2 and set(writes[-1]["data"]) == {str(tmp_path / "hb" / f"rank{r}.json") for r in (0, 1)}
    clock[0] += hb_mod.PROGRESS_SAVE_SECONDS
    beat(0, 9)
    probe.collect()
    assert len(writes) == 3 and writes[-1]["data"][str(tmp_path / "hb" / "rank0.json")]["step"] == 9
    beat(0, 10)
    probe.collect()
    probe.close()
    assert len(writes) == 4 and writes[-1]["data"][str(tmp_path / "hb" / "rank0.json")]["step"] == 10


def test_active_log_matches_and_progress_survive_a_restart(tmp_path):
    p, log = following_logs_probe(tmp_path)
    with open(log, "a") as f:
        f.write(" iteration      120/  100000 | lm loss: 2.31E+00 |\n")
        f.write("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity)\n")
    obs = p.collect().value
    assert [a.category for a in obs.active] == ["oom"] and "train" in obs.progress_at
    p.close()
    doc = json.loads((tmp_path / "state" / OFFSETS_FILE).read_text())
    assert doc["extra"]["active"] and doc["extra"]["progress_at"]
    q = logs_probe(tmp_path)  # the restarted daemon: the lines lie before the saved offset
    obs2 = q.collect().value
    assert [(a.category, a.first_at, a.count) for a in obs2.active] == [(a.category, a.first_at, a.count)
                                                                       for a in obs.active]
    assert obs2.progress_at == obs.progress_at
    q.close()


def test_a_progress_file_that_cannot_be_saved_is_said_once_per_episode(tmp_path, monkeypatch):
    """A full or broken state folder: each round's failed save logged the same warning again (a
    line every 10 s for the whole episode); once, then once more when saving works again."""
    import logging

    from watchdog.probes import heartbeat as hb_mod

    clock = [1000.0]
    monkeypatch.setattr(hb_mod.time, "monotonic", lambda: clock[0])
    (tmp_path / "hb").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / PROGRESS_FILE).mkdir()  # the save cannot replace a folder
    records = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("watchdog.probes.heartbeat")
    level, disabled = logger.level, logger.disabled
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.disabled = False
    try:
        probe = _hb_probe(tmp_path)
        for step in range(1, 6):
            clock[0] += 120
            (tmp_path / "hb" / "rank0.json").write_text(json.dumps({"step": step, "phase": "train", "time": time.time()}))
            probe.collect()
        said = [r.getMessage() for r in records if "heartbeat progress" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith("cannot save heartbeat progress"), said
        (tmp_path / "state" / PROGRESS_FILE).rmdir()
        clock[0] += 120
        (tmp_path / "hb" / "rank0.json").write_text(json.dumps({"step": 9, "phase": "train", "time": time.time()}))
        probe.collect()
        said = [r.getMessage() for r in records if "heartbeat progress" in r.getMessage()]
        assert len(said) == 2 and "saved to" in said[1] and "again" in said[1], said
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.disabled = disabled


def test_a_secret_on_a_matched_line_is_redacted_before_it_is_kept(tmp_path):
    """A matched line goes into the finding's summary and evidence (pages, status) and the saved
    state: a secret-looking assignment on it is redacted first."""
    p, log = following_logs_probe(tmp_path)
    with open(log, "a") as f:
        f.write("RuntimeError: NPU out of memory while uploading with WANDB_API_KEY=abcd1234efgh5678\n")
    obs = p.collect().value
    p.close()
    [a] = obs.active
    kept = " ".join([a.summary, a.first_summary, *a.evidence, *(e.text for e in obs.events)])
    assert "NPU out of memory" in kept and "[REDACTED]" in a.summary
    assert "abcd1234efgh5678" not in kept
    assert "abcd1234efgh5678" not in (tmp_path / "state" / OFFSETS_FILE).read_text()


def test_a_channels_url_on_a_matched_line_is_redacted_before_it_is_kept(tmp_path):
    """A training script that posts to the same Slack webhook the daemon pages through prints its
    URL in the traceback of a failed post: the config's own secrets (the URL and its long path
    pieces) are redacted from the matched line like any secret-looking assignment."""
    from watchdog.probes.base import ProbeContext
    from watchdog.probes.discovered_logs import build

    (tmp_path / "state").mkdir()
    log = tmp_path / "rank0.log"
    log.write_text("")
    url = "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/cccccccccccccccccccccccc"
    cfg = load_config_text(
        f"probes: {{logs: {{enabled: true, sources: [{{name: train, paths: ['{tmp_path}/rank*.log']}}]}}}}\n"
        f"alerting: {{channels: [{{name: ops, type: slack, url: '{url}'}}]}}\n")
    [p] = build(ProbeContext(config=cfg, state_dir=str(tmp_path / "state")))
    p.collect()
    with open(log, "a") as f:
        f.write("Traceback (most recent call last):\n  File \"notify.py\", line 3, in <module>\n"
                f"requests.exceptions.HTTPError: 404 Client Error: Not Found for url: {url}\n"
                "RuntimeError: NPU out of memory (posted to /services/T0AAAAAAA/B0BBBBBBB/cccccccccccccccccccccccc)\n")
    obs = p.collect().value
    p.close()
    kept = " ".join([e.text for e in obs.events] + [s for a in obs.active for s in (a.summary, *a.evidence)])
    assert "NPU out of memory" in kept and "[REDACTED]" in kept
    assert "cccccccccccccccccccccccc" not in kept and "B0BBBBBBB" not in kept
    assert "cccccccccccccccccccccccc" not in (tmp_path / "state" / OFFSETS_FILE).read_text()


def test_a_round_that_clears_a_blind_spot_is_judged_at_once(tmp_path):
    """A round with no new match is quiet (no detector pass after it), unless the probe's own
    blind spots changed: the round whose save works again is judged at once, so a
    log_offsets_unsaved alert still pending on the old answer does not fire after the cause
    has gone (it did, a second after the daemon logged the offsets saved again)."""
    (tmp_path / "state").mkdir()
    log = tmp_path / "rank0.log"
    log.write_text("")
    p = logs_probe(tmp_path)
    assert p.collect().quiet is True  # the first round: nothing new, nothing wrong
    blocker = tmp_path / "state" / (OFFSETS_FILE + ".tmp")  # stops root's save too
    blocker.mkdir()
    (blocker / "keep").write_text("")
    with open(log, "a") as f:
        f.write("iteration 1 | loss 2.0\n")
    first = p.collect()
    assert first.value.state_error and first.quiet is False
    with open(log, "a") as f:
        f.write("iteration 2 | loss 2.0\n")
    assert p.collect().quiet is True  # the same condition: nothing to judge again
    (blocker / "keep").unlink()
    blocker.rmdir()
    with open(log, "a") as f:
        f.write("iteration 3 | loss 2.0\n")
    cleared = p.collect()
    assert cleared.value.state_error is None and cleared.quiet is False
    assert p.collect().quiet is True
    p.close()

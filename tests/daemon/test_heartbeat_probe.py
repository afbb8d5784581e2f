"""The heartbeat probe and heartbeat findings against real writer processes and real files."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.liveness_kit import Children, Harness, make_config

BASE = {"host": "node-t", "training_job": "job-t"}


@pytest.fixture
def kids():
    c = Children()
    yield c
    c.close()


def hb_config(tmp_path, kids, process=None, **hb):
    stale = hb.pop("stale_after", {"train": "1.5s"})
    return make_config(tmp_path, kids.marker, process=process, heartbeat={"stale_after": stale, **hb})


def test_healthy_writers_have_progress_and_no_findings(tmp_path, kids):
    w0 = kids.writer(tmp_path / "rank0.json", "healthy", rank=0)
    kids.writer(tmp_path / "rank1.json", "healthy", rank=1)
    h = Harness(hb_config(tmp_path, kids, process={"expected": 2}))
    h.wait_round(lambda: len(h.processes()) == 2 and len(h.last["heartbeat"].readings) == 2
                 and all((r.step or 0) > 3 for r in h.last["heartbeat"].readings),
                 what="both ranks stepping")
    first = h.reading(0)
    h.wait_round(lambda: h.reading(0).step > first.step + 3, what="rank 0 advancing")
    r = h.reading(0)
    assert r.pid == w0.pid and r.phase == "train" and r.format == "json" and r.error is None
    assert r.step_changed_at is not None and r.step_changed_at > first.step_changed_at
    assert h.findings() == []


def test_writer_that_stops_writing_goes_stale(tmp_path, kids):
    kids.writer(tmp_path / "rank0.json", "healthy", rank=0)
    quiet = kids.writer(tmp_path / "rank1.json", "stop_after:3", rank=1)
    h = Harness(hb_config(tmp_path, kids))
    f = h.wait_finding("heartbeat_stale")
    assert f.labels == {**BASE, "rank": "1"}
    assert f.details["pid"] == quiet.pid and f.details["phase"] == "train" and f.details["step"] == 3
    assert f.details["threshold_seconds"] == 1.5 and f.details["learned"] is False
    assert not h.find("heartbeat_stale", rank="0")


def test_busy_loop_without_progress(tmp_path, kids):
    spinner = kids.writer(tmp_path / "rank0.json", "no_progress", rank=0)
    h = Harness(hb_config(tmp_path, kids, stale_after={"train": "30s"}, no_progress_after="1s"))
    f = h.wait_finding("heartbeat_no_progress")
    assert f.labels == {**BASE, "rank": "0"}
    assert f.details["pid"] == spinner.pid and f.details["step"] == 7
    assert not h.find("heartbeat_stale")  # the file is fresh: this is a hang, not a silence


def test_sigstopped_writer_is_stale_and_stopped(tmp_path, kids):
    w = kids.writer(tmp_path / "rank0.json", "healthy", rank=0)
    h = Harness(hb_config(tmp_path, kids, process={"stopped_after": "0.5s"}))
    h.wait_round(lambda: h.processes() and (h.reading(0).step or 0) > 2, what="writer running")
    os.kill(w.pid, signal.SIGSTOP)
    f = h.wait_finding("heartbeat_stale")
    assert f.labels == {**BASE, "rank": "0"} and f.details["pid"] == w.pid
    s = h.find("rank_stopped")
    assert s and s[0].labels == {**BASE, "rank": "0", "pid": str(w.pid)}
    os.kill(w.pid, signal.SIGCONT)
    h.wait_round(lambda: not h.find("heartbeat_stale") and not h.find("rank_stopped"), what="recovery")


def test_killed_writer_rank_missing_and_stale(tmp_path, kids):
    kids.writer(tmp_path / "rank0.json", "healthy", rank=0)
    victim = kids.writer(tmp_path / "rank1.json", "healthy", rank=1)
    h = Harness(hb_config(tmp_path, kids, process={"expected": 2}))
    h.wait_round(lambda: len(h.processes()) == 2 and len(h.last["heartbeat"].readings) == 2,
                 what="both ranks writing")
    victim.kill()
    victim.wait()
    f = h.wait_finding("heartbeat_stale", rank="1")
    assert f.details["pid"] == victim.pid
    m = h.find("rank_missing")
    assert m and m[0].labels == {**BASE, "rank": "1", "pid": str(victim.pid)}


def test_long_checkpoint_does_not_page(tmp_path, kids):
    kids.writer(tmp_path / "rank0.json", "checkpoint", rank=0)
    h = Harness(hb_config(tmp_path, kids, stale_after={"train": "1s", "checkpoint": "1h"}, no_progress_after="1s"))
    h.wait_round(lambda: h.reading(0).phase == "checkpoint", what="checkpoint phase")
    beat = h.reading(0).beat_time
    # Well past the train threshold (and the no-progress limit), still quiet.
    h.wait_round(lambda: time.time() - beat > 3.0, what="a long checkpoint")
    assert h.findings() == []


def test_done_resolves_and_silences_until_restart(tmp_path, kids):
    w = kids.writer(tmp_path / "rank0.json", "done", rank=0, env={"LINGER": "0.5"})
    h = Harness(hb_config(tmp_path, kids, process={"expected": 1}))
    h.wait_round(lambda: h.processes(), what="the rank process")
    w.wait()
    h.wait_round(lambda: h.reading(0).phase == "done" and not h.processes(), what="job finished")
    beat = h.reading(0).beat_time
    h.wait_round(lambda: time.time() - beat > 2.5, what="past the stale threshold")
    assert h.findings() == []  # no job_gone, no stale: the job said it finished
    # The job restarts: a new run writes `train` from step 1, then goes quiet.
    again = kids.writer(tmp_path / "rank0.json", "stop_after:2", rank=0)
    f = h.wait_finding("heartbeat_stale")
    assert f.labels == {**BASE, "rank": "0"} and f.details["pid"] == again.pid


def test_nan_grad_norm_with_zero_loss(tmp_path, kids):
    w = kids.writer(tmp_path / "rank3.json", "nan")
    h = Harness(hb_config(tmp_path, kids))
    f = h.wait_finding("loss_nan")
    assert f.labels == {**BASE, "rank": "3"}  # rank from the file name
    assert f.value == "grad_norm" and f.details["loss"] == "0.0" and f.details["pid"] == w.pid


def test_files_rewritten_under_the_reader_never_alarm(tmp_path, kids):
    # Non-atomic rewrites (truncate, write half, pause, write the rest) in a tight loop.
    torn = r"""
import json, sys, time
path, step = sys.argv[1], 0
while True:
    step += 1
    body = json.dumps({"step": step, "phase": "train", "loss": 1.0})
    with open(path, "w") as f:
        f.write(body[:9]); f.flush(); time.sleep(0.004); f.write(body[9:])
    time.sleep(0.002)
"""
    kids.spawn(torn, str(tmp_path / "rank0.json"))
    h = Harness(hb_config(tmp_path, kids, unreadable_after="2s"))
    h.wait_round(lambda: h.last["heartbeat"].readings, what="the file to appear")
    steps = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        h.round()
        r = h.reading(0)
        if r.step is not None:
            steps.append(r.step)
        assert not h.find("heartbeat_unreadable") and not h.find("heartbeat_stale")
    assert steps and steps == sorted(steps)  # a torn read never yields a regressed or bogus step


def test_persistently_broken_file_alarms_only_after_a_while(tmp_path, kids):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"step": 5, "phase": "train"}))
    h = Harness(hb_config(tmp_path, kids, unreadable_after="1s", stale_after={"train": "1h"}))
    h.round()
    path.write_text('{"step": 6, "pha')
    h.round()
    assert h.reading(0).error and h.reading(0).step == 5  # the last good values are kept
    assert not h.find("heartbeat_unreadable")
    f = h.wait_finding("heartbeat_unreadable")
    assert f.labels == {**BASE, "rank": "0"} and "half-written" in f.value
    assert f.details["read_errors_total"] >= 2


def test_missing_file_is_not_started_not_stale(tmp_path, kids):
    cfg = hb_config(tmp_path, kids, start_grace="0.5s", paths=[str(tmp_path / "rank0.json")])
    h = Harness(cfg)
    h.round()
    r = h.reading(0)
    assert r.exists is False and r.beat_time is None
    assert not h.find("heartbeat_stale")
    f = h.wait_finding("process_not_started")
    assert f.labels == BASE and f.details["source"] == "heartbeat"


def test_touch_heartbeat_and_clock_skew(tmp_path, kids):
    path = tmp_path / "rank2.json"
    path.touch()
    h = Harness(hb_config(tmp_path, kids, stale_after={"default": "1h"}))
    h.round()
    r = h.reading(2)
    assert r.format == "mtime" and r.beat_time == pytest.approx(os.stat(path).st_mtime)
    assert h.findings() == []
    future = time.time() + 3600
    os.utime(path, (future, future))
    f = h.wait_finding("heartbeat_clock_skew")
    assert f.labels == {**BASE, "rank": "2"} and f.details["ahead_seconds"] > 3000
    assert not h.find("heartbeat_stale")


def test_learned_threshold_after_warmup(tmp_path, kids):
    # Configured train threshold is an hour; the job's own pace (steps every ~50 ms) teaches a
    # threshold of a second or so, and a silence after that is caught long before an hour.
    w = kids.writer(tmp_path / "rank0.json", "stop_after:40", rank=0)
    h = Harness(hb_config(tmp_path, kids, stale_after={"train": "1h"},
                          learn={"enabled": True, "warmup": "1s", "min_gaps": 5, "factor": 3, "min": "1s",
                                 "max": "10m"}))
    f = h.wait_finding("heartbeat_stale")
    assert f.labels == {**BASE, "rank": "0"} and f.details["pid"] == w.pid
    assert f.details["learned"] is True and 1.0 <= f.details["threshold_seconds"] < 60
    r = h.reading(0)
    assert r.step_gaps >= 5 and r.max_step_gap is not None


def test_learning_waits_for_warmup(tmp_path, kids):
    kids.writer(tmp_path / "rank0.json", "stop_after:40", rank=0)
    h = Harness(hb_config(tmp_path, kids, stale_after={"train": "1h"},
                          learn={"enabled": True, "warmup": "1h", "min_gaps": 5, "factor": 3, "min": "1s"}))
    h.wait_round(lambda: h.reading(0).step == 40, what="writer done stepping")
    beat = h.reading(0).beat_time
    h.wait_round(lambda: time.time() - beat > 2.5, what="silence past a learned threshold")
    assert h.findings() == []

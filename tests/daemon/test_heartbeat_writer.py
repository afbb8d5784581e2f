"""The trainer-side helper in contrib/heartbeat: atomic, throttled, phase-aware, never raising."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading

import pytest


from tests.helpers import REPO
from watchdog.parse.heartbeat_format import parse_heartbeat

CONTRIB = REPO / "contrib" / "heartbeat"
sys.path.insert(0, str(CONTRIB))

from heartbeat import Heartbeat  # noqa: E402
from hf_callback import WatchdogHeartbeatCallback  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


def read(path):
    return json.loads(open(path).read())


def test_writes_on_creation_and_throttles_beats(tmp_path):
    clock = Clock()
    hb = Heartbeat(str(tmp_path / "rank{rank}.json"), rank=2, min_interval=10, clock=clock)
    path = tmp_path / "rank2.json"
    assert read(path)["phase"] == "init" and read(path)["rank"] == 2
    assert hb.beat(step=1, loss=1.5) is True
    clock.t += 3
    assert hb.beat(step=2, loss=1.4) is False        # throttled
    assert read(path)["step"] == 1
    clock.t += 8
    assert hb.beat(step=3, loss=1.3) is True
    rec = read(path)
    assert (rec["step"], rec["loss"], rec["time"], rec["pid"]) == (3, 1.3, clock.t, os.getpid())
    # The written file is what the daemon parses.
    assert parse_heartbeat(path.read_bytes()).step == 3


def test_phase_changes_are_written_at_once_and_restored(tmp_path):
    clock = Clock()
    hb = Heartbeat(str(tmp_path / "hb.json"), min_interval=60, clock=clock, phase="train")
    hb.beat(step=5)
    with hb.phase("checkpoint"):
        assert read(tmp_path / "hb.json")["phase"] == "checkpoint"
        with hb.phase("eval"):
            assert read(tmp_path / "hb.json")["phase"] == "eval"
        assert read(tmp_path / "hb.json")["phase"] == "checkpoint"
    assert read(tmp_path / "hb.json")["phase"] == "train"
    hb.done()
    assert read(tmp_path / "hb.json")["phase"] == "done"


def test_nan_is_written_so_the_daemon_sees_it(tmp_path):
    hb = Heartbeat(str(tmp_path / "hb.json"), min_interval=0)
    hb.beat(step=1, loss=0.0, grad_norm=float("nan"))
    assert math.isnan(parse_heartbeat((tmp_path / "hb.json").read_bytes()).grad_norm)


def test_io_errors_are_swallowed_and_counted(tmp_path):
    hb = Heartbeat(str(tmp_path / "missing-dir" / "hb.json"), min_interval=0)
    assert hb.errors == 1 and "FileNotFoundError" in hb.last_error
    assert hb.beat(step=1) is False
    with hb.phase("checkpoint"):
        pass
    hb.done()
    assert hb.errors >= 4
    assert not (tmp_path / "missing-dir").exists()


def test_no_temp_files_left_and_concurrent_beats_are_safe(tmp_path):
    hb = Heartbeat(str(tmp_path / "hb.json"), min_interval=0)

    def worker(k):
        for i in range(200):
            hb.beat(step=k * 1000 + i)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert hb.errors == 0
    assert sorted(os.listdir(tmp_path)) == ["hb.json", "hb.json.ring"]  # the file and its flight recorder
    assert parse_heartbeat((tmp_path / "hb.json").read_bytes()).step is not None


def test_helper_never_imports_the_daemon_package(tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import heartbeat; "
            "h = heartbeat.Heartbeat(sys.argv[2], min_interval=0); h.beat(step=1); "
            "print(sorted(m for m in sys.modules if m == 'watchdog' or m.startswith('watchdog.')))")
    out = subprocess.run([sys.executable, "-c", code, str(CONTRIB), str(tmp_path / "hb.json")],
                         capture_output=True, text=True, check=True, cwd=str(tmp_path))
    assert out.stdout.strip() == "[]"
    assert read(tmp_path / "hb.json")["step"] == 1


class _NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_hf_callback_phases_and_values(tmp_path):
    cb = WatchdogHeartbeatCallback(str(tmp_path / "rank{rank}.json"), min_interval=0, tokens_per_step=4096)
    path = tmp_path / f"rank{cb.hb.rank if cb.hb.rank is not None else 0}.json"
    args, ctl = _NS(), _NS(should_save=False, should_evaluate=False)
    assert read(path)["phase"] == "init"
    cb.on_train_begin(args, _NS(global_step=0), ctl)
    cb.on_step_begin(args, _NS(global_step=0), ctl)
    cb.on_log(args, _NS(global_step=1), ctl, logs={"loss": float("nan"), "grad_norm": 3.0})
    cb.on_step_end(args, _NS(global_step=1), ctl)
    rec = parse_heartbeat(path.read_bytes())
    assert rec.step == 1 and rec.phase == "train" and math.isnan(rec.loss) and rec.grad_norm == 3.0
    assert rec.throughput is not None and rec.throughput > 0
    cb.on_step_end(args, _NS(global_step=2), _NS(should_save=True, should_evaluate=False))
    assert read(path)["phase"] == "checkpoint"
    cb.on_save(args, _NS(global_step=2), ctl)
    assert read(path)["phase"] == "train"
    cb.on_train_end(args, _NS(global_step=2), ctl)
    assert read(path)["phase"] == "done"


def test_hf_throughput_is_timed_between_step_ends_so_a_slow_loader_shows(tmp_path):
    """The old callback timed on_step_begin -> on_step_end and never saw the data loader."""
    from npu_watchdog_heartbeat import Pace

    now = [100.0]
    cb = WatchdogHeartbeatCallback(str(tmp_path / "hb.json"), min_interval=0, tokens_per_step=1000)
    cb.pace = Pace(window=3, clock=lambda: now[0])
    args, ctl = _NS(), _NS(should_save=False, should_evaluate=False)
    cb.on_train_begin(args, _NS(global_step=0), ctl)
    for step in range(1, 9):
        now[0] += 0.0 if step <= 4 else 0.9    # the loader starves from step 5 on
        cb.on_step_begin(args, _NS(global_step=step - 1), ctl)
        now[0] += 0.1                          # the step itself never changes
        cb.on_step_end(args, _NS(global_step=step), ctl)
        if step == 4:
            assert read(tmp_path / "hb.json")["tokens_per_s"] == pytest.approx(10000.0)
    assert read(tmp_path / "hb.json")["tokens_per_s"] == pytest.approx(1000.0)

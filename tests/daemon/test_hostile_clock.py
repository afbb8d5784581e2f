"""The wall clock steps under the running daemon (a VM resumed, chrony stepping a clock that was
wrong at boot), for real: the daemon runs with an LD_PRELOAD library
(tests/fixtures/clockshift/clockshift.c, compiled here with gcc) that moves every CLOCK_REALTIME
read (clock_gettime, gettimeofday, time) by the seconds written in a file, while the monotonic
clock runs on. A time namespace cannot do this: it offsets only the monotonic and boot clocks.

- forward 2 h during an open incident: no RESOLVED for the incident that is still broken, no
  `heartbeat_stale` for a rank that keeps writing;
- back 1 h: a page whose first attempt failed is retried after its back-off, not an hour later,
  and a rank that died just before is reported stale after its threshold, not an hour later.

Each step is said once in the journal. Messages are counted per channel, firing and resolved.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from tests.fakes.receivers import Answer, Receiver
from tests.helpers import REPO, wait_for

pytestmark = pytest.mark.slow

OOM = b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity)\n"
SHIM = REPO / "tests" / "fixtures" / "clockshift" / "clockshift.c"

# A rank's heartbeat writer: its step advances every 0.3 s (atomic rewrite). Without an argument
# the file's mtime is its beat; with `own` each beat carries the writer's own clock (`time`).
WRITER = r"""
import json, os, sys, time
path, own, step = sys.argv[1], sys.argv[2:] == ["own"], 0
while True:
    step += 1
    beat = {"step": step, "phase": "train"}
    if own:
        beat["time"] = time.time()
    with open(path + ".tmp", "w") as fh:
        json.dump(beat, fh)
    os.replace(path + ".tmp", path)
    time.sleep(0.3)
"""


@pytest.fixture
def shifted(tmp_path) -> Tuple[dict, Path]:
    """(environment for the daemon, the file holding its wall clock's shift in seconds)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the clock-step library")
    lib = tmp_path / "clockshift.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(SHIM), "-ldl"], check=True,
                   capture_output=True)
    shift = tmp_path / "clock-shift"
    shift.write_text("0\n")
    return {"LD_PRELOAD": str(lib), "CLOCKSHIFT_FILE": str(shift)}, shift


def step(shift: Path, seconds: float) -> None:
    tmp = shift.with_suffix(".tmp")
    tmp.write_text(f"{seconds}\n")
    tmp.replace(shift)


def config(tmp: Path, rx: Receiver, train_stale: str) -> dict:
    (tmp / "logs").mkdir()
    (tmp / "hb").mkdir()
    (tmp / "logs" / "train_rank0.log").write_bytes(b"step 1 loss 2.5\n")
    return {
        "paths": {"state_dir": str(tmp / "state"), "snapshot_dir": str(tmp / "snapshots")},
        "probes": {
            "logs": {"enabled": True, "interval": "1s", "rescan": "1s", "hold": "1h",
                     "sources": [{"name": "train", "paths": [str(tmp / "logs" / "*.log")]}]},
            "heartbeat": {"enabled": True, "interval": "1s", "paths": [str(tmp / "hb" / "rank*.json")],
                          "stale_after": {"train": train_stale}},
        },
        "alerting": {"group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "1s", "retry_max": "2s",
                     "channels": [{"type": "webhook", "name": "pager", "url": rx.url}]},
    }


def sent(rx: Receiver) -> List[Tuple[str, str, str]]:
    """(status, rule, rank) of every alert in every accepted message, in order."""
    return [(r.json["status"], a["labels"]["alertname"], a["labels"].get("rank", ""))
            for r in rx.accepted() for a in r.json["alerts"]]


def log_followed(d) -> None:
    """The logs probe has had its first round: the log is followed from its end, so a line written
    now is new to it (written before, it would be old content the daemon starts after)."""
    wait_for(lambda: any(p["name"] == "logs" and p["runs_total"] >= 1 for p in d.status()["probes"]),
             what="the logs probe's first round")


def rounds(d, n: int) -> None:
    runs = {p["name"]: p["runs_total"] for p in d.status()["probes"]}
    wait_for(lambda: all(p["runs_total"] >= runs[p["name"]] + n for p in d.status()["probes"]),
             what=f"{n} more probe rounds")


@pytest.mark.parametrize("beat", ["mtime", "own"])
def test_a_forward_step_of_two_hours_resolves_nothing_and_ages_no_heartbeat(make_daemon, tmp_path, procs,
                                                                             shifted, beat) -> None:
    """`mtime`: the beat is the file's mtime (the kernel's clock, not moved by the library);
    `own`: the beat carries the writer's own clock, which steps with the daemon's (the writer runs
    under the same library)."""
    env, shift = shifted
    with Receiver("webhook") as pager:
        d = make_daemon(config(tmp_path, pager, train_stale="30s"), env=env)
        hb = str(tmp_path / "hb" / "rank0.json")
        if beat == "own":
            procs([sys.executable, "-c", WRITER, hb, "own"], env={**os.environ, **env})
        else:
            procs([sys.executable, "-c", WRITER, hb])
        wait_for(lambda: any(p["name"] == "heartbeat" and "1/1" in (p.get("last_result") or "")
                             for p in d.status()["probes"]), what="the heartbeat read")
        log_followed(d)
        with open(tmp_path / "logs" / "train_rank0.log", "ab") as fh:
            fh.write(OOM)
        pager.wait_for(1)
        step(shift, 7200)
        wait_for(lambda: d.status()["started_at"] and d.metrics(), what="the daemon answering")
        rounds(d, 5)
        time.sleep(4)  # resolve_delay and group windows twice over: a RESOLVED would be here
        assert sent(pager) == [("firing", "log_oom", "0")], sent(pager)
        assert not any(f["rule"] in ("heartbeat_stale", "heartbeat_clock_skew") for f in d.status()["findings"])
        assert any(f["rule"] == "log_oom" for f in d.status()["findings"]), "the incident is still open"
        assert "wall clock stepped forward by 7200 s" in d.log()
        assert d.log().count("wall clock stepped") == 1, "said once"
        m = d.metrics()
        assert m["npu_watchdog_clock_steps_total"] == 1
        assert abs(m["npu_watchdog_clock_offset_seconds"] - 7200) < 60


def test_a_backward_step_of_one_hour_does_not_hold_a_retry(make_daemon, tmp_path, shifted) -> None:
    env, shift = shifted
    with Receiver("webhook") as pager:
        pager.script(Answer(500, {"error": "try again"}))
        d = make_daemon(config(tmp_path, pager, train_stale="1h"), env=env)
        log_followed(d)
        with open(tmp_path / "logs" / "train_rank0.log", "ab") as fh:
            fh.write(OOM)
        pager.wait_arrived(1)  # the first attempt fails; its retry is due within retry_max (2 s)
        step(shift, -3600)
        pager.wait_for(1, timeout=120)  # the bound only stops a failing test: before, an hour
        wait_for(lambda: "wall clock stepped back by 3600 s" in d.log(), what="the step in the journal")
        rounds(d, 3)
        time.sleep(3)
        assert sent(pager) == [("firing", "log_oom", "0")], sent(pager)
        assert len(pager.requests) == 2, "one failed attempt, then the page once"
        assert d.log().count("wall clock stepped") == 1, "said once"


@pytest.mark.parametrize("beat", ["mtime", "own"])
def test_a_rank_dead_just_before_a_backward_step_is_stale_after_its_threshold(make_daemon, tmp_path, procs,
                                                                              shifted, beat) -> None:
    env, shift = shifted
    with Receiver("webhook") as pager:
        d = make_daemon(config(tmp_path, pager, train_stale="3s"), env=env)
        hb = str(tmp_path / "hb" / "rank0.json")
        if beat == "own":
            writer = procs([sys.executable, "-c", WRITER, hb, "own"], env={**os.environ, **env})
        else:
            writer = procs([sys.executable, "-c", WRITER, hb])
        wait_for(lambda: any(p["name"] == "heartbeat" and "1/1" in (p.get("last_result") or "")
                             for p in d.status()["probes"]), what="the heartbeat read")
        rounds(d, 2)
        writer.kill()  # the rank dies just before the step
        writer.wait()
        step(shift, -3600)
        # Within minutes (the bound only stops a failing test): before, an hour, and a false
        # clock-skew warning meanwhile.
        wait_for(lambda: ("firing", "heartbeat_stale", "0") in sent(pager), timeout=120,
                 what="the dead rank paged stale")
        assert "wall clock stepped back by 3600 s" in d.log()
        rounds(d, 3)
        time.sleep(3)
        assert sent(pager) == [("firing", "heartbeat_stale", "0")], sent(pager)
        assert not any(f["rule"] == "heartbeat_clock_skew" for f in d.status()["findings"])

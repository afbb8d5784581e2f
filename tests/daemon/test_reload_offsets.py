"""A reload keeps the log offsets on disk, so a daemon killed after it loses no line.

A reload builds a new logs probe and, when the running one takes its settings over, closes it;
the new probe's tailer had read nothing, and closing saved its empty offsets over the running
probe's file. Until the running probe read another line, a daemon killed (OOM killer, SIGKILL,
power) came back with no offsets: every log was read from its end, and a failure written while it
was down was never paged.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.helpers import wait_for


def _offsets(state: Path) -> dict:
    try:
        return json.loads((state / "log-offsets.json").read_text())["files"]
    except (FileNotFoundError, ValueError, KeyError):
        return {}


def test_a_reload_keeps_the_offsets_and_a_line_written_while_killed_is_paged(make_daemon, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_text("step 1 loss 2.0\n")
    config = {"probes": {"logs": {"enabled": True, "interval": "1s",
                                  "sources": [{"name": "train", "paths": [str(logdir / "*.log")]}]}}}
    d = make_daemon(config)
    with open(log, "a") as fh:
        fh.write("step 2 loss 1.9\n")
    size = log.stat().st_size
    wait_for(lambda: _offsets(tmp_path / "state").get(str(log), {}).get("offset") == size, what="offset saved")
    d.signal(signal.SIGHUP)
    wait_for(lambda: "config reloaded" in d.log(), what="reload applied")
    # the running probe read nothing since: the file on disk is the one it wrote before the reload
    assert _offsets(tmp_path / "state").get(str(log), {}).get("offset") == size, _offsets(tmp_path / "state")
    d.kill9()
    with open(log, "a") as fh:
        fh.write("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity)\n")
    again = make_daemon(config)
    oom = wait_for(lambda: [f for f in again.status()["findings"] if f["rule"] == "log_oom"], timeout=30,
                   what="the OOM line written while the daemon was down")[0]
    assert "NPU out of memory" in oom["evidence"][0]

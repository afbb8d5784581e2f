"""npu-smi is done when it exits, not when its stdout closes.

A site wrapper around npu-smi (logging, a metrics side-car) may leave a background helper that
inherited the wrapper's stdout and keeps it open long after npu-smi printed a full table and
exited 0. Reading to end-of-file would wait for the helper and report a healthy npu-smi as hung
(a false critical page, and the NPUs unwatched). Real processes: the fake npu-smi replays a table,
the helper is a real `sleep` holding the pipe.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import TESTS, wait_for
from watchdog.host.subproc import run_command
from watchdog.npusmi.run import NpuSmiStats, query_info

FAKE = str(TESTS / "fakes" / "npu-smi")


def _wrapper(tmp_path: Path, helper_pids: Path) -> Path:
    """An npu-smi wrapper whose helper outlives it with stdout and stderr inherited (30 min)."""
    script = tmp_path / "npu-smi-wrapped"
    script.write_text(
        "#!/bin/sh\n"
        f'"{FAKE}" "$@"\n'
        "rc=$?\n"
        "sleep 1800 &\n"
        f'echo $! >> "{helper_pids}"\n'
        "exit $rc\n")
    script.chmod(0o755)
    return script


@pytest.fixture
def helpers(tmp_path):
    """The helpers' pid file; every helper the wrappers left is killed at the end."""
    pids = tmp_path / "helper-pids"
    yield pids
    if pids.exists():
        for line in pids.read_text().split():
            try:
                os.kill(int(line), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_helper_holding_stdout_does_not_make_a_finished_npu_smi_hang(tmp_path, helpers, monkeypatch):
    scen = tmp_path / "scenario.json"
    scen.write_text(json.dumps({"generate": {"npus": 8}}))
    monkeypatch.setenv("FAKE_NPU_SMI_SCENARIO", str(scen))
    stats = NpuSmiStats()
    obs = query_info(str(_wrapper(tmp_path, helpers)), 20.0, stats=stats)
    assert len(obs.chips) == 8 and stats.failures["timeout"] == 0
    assert len(helpers.read_text().split()) == 1  # the helper really ran, and holds the pipe still
    # The command's own exit code is kept, and a command that closes its pipes but keeps running
    # is still waited for: the end is the exit, whichever comes first.
    out = run_command(["sh", "-c", "exec >&- 2>&-; sleep 1; exit 3"], timeout=30)
    assert out.returncode == 3 and not out.timed_out


def test_the_daemon_pages_nothing_for_an_npu_smi_whose_helper_keeps_stdout_open(make_daemon, tmp_path, helpers):
    scen = tmp_path / "scenario.json"
    scen.write_text(json.dumps({"generate": {"npus": 8}}))
    wrapper = _wrapper(tmp_path, helpers)
    with Receiver("webhook") as rx:
        d = make_daemon({
            "probes": {"npu": {"enabled": True, "interval": "1s", "npu_smi": str(wrapper),
                               "command_timeout": "3s", "health_interval": "0s", "failing_after": "1s"}},
            "alerting": {"group_window": "1s", "retry_initial": "300ms", "retry_max": "1s",
                         "for": {"npu_smi_hung": "0s"},
                         "channels": [{"type": "webhook", "name": "hook", "url": rx.url}]},
            "snapshots": {"enabled": False},
        }, env={"FAKE_NPU_SMI_SCENARIO": str(scen)})
        wait_for(lambda: d.metrics().get("npu_watchdog_npus_seen") == 8, timeout=60, what="the table read")
        # Several rounds, each well past the command timeout of a helper-held pipe.
        wait_for(lambda: len(helpers.read_text().split()) >= 5, timeout=90, what="five npu-smi rounds")
        time.sleep(4)  # a hang verdict from the last round would land within the 3 s timeout
        m = d.metrics()
        assert m['npu_watchdog_npu_smi_failures_total{reason="timeout"}'] == 0
        assert m["npu_watchdog_npus_seen"] == 8
        rules = {f["rule"] for f in d.status()["findings"]}
        assert "npu_smi_hung" not in rules and "probe_down" not in rules, rules
        sent = [a["labels"]["alertname"] for r in rx.accepted() for a in r.json["alerts"]]
        assert "npu_smi_hung" not in sent, sent

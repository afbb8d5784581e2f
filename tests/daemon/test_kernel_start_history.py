"""A start is not an incident: the daemon, started on the shipped example config on a node whose
kernel log already holds another process's segfault, reads that record (the kernel probe reads
the recent history at start) and neither sends nor holds anything about it.

A real process segfaults before the daemon starts (the kernel writes `python3[pid]: segfault at`
to /dev/kmsg); the test looks only at that pid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable")]


def kernel_log_names(pid: int) -> bool:
    out = subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout
    return f"[{pid}]: segfault at" in out


def test_old_kills_of_other_processes_in_the_kernel_log_send_and_hold_nothing_on_start(tmp_path):
    victim = subprocess.Popen([sys.executable, "-c", "import ctypes; ctypes.string_at(0)"],
                              stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert victim.wait(30) == -11
    wait_for(lambda: kernel_log_names(victim.pid), timeout=30, what="the segfault in the kernel log")
    time.sleep(1.5)  # the record is older than the daemon by more than the clocks' rounding
    node = ShippedNode(tmp_path / "node")
    try:
        wait_for(lambda: node.metric('npu_watchdog_probe_up{probe="kernel"}') == 1, timeout=60,
                 what="kernel probe up")
        # The probe matched the old record (the segfault rule counted it) ...
        wait_for(lambda: node.metric('npu_watchdog_kernel_matches_total{category="crash",rule="kernel_segfault"}') >= 1,
                 timeout=60, what="the old segfault read and matched")
        time.sleep(12)  # a shipped kernel round (10 s) and a group window more: nothing may follow
        # ... and holds no finding about it, and nothing was sent.
        about = [f for f in node.status().get("findings", []) if victim.pid in f.get("details", {}).get("pids", [])]
        assert about == [], about
        sent = node.messages()
        assert all(str(victim.pid) not in json.dumps(m) for ms in sent.values() for m in ms), sent
        assert node.counts() == {"feishu": 0, "hook": {"firing": 0, "resolved": 0}}, sent
    finally:
        node.stop()

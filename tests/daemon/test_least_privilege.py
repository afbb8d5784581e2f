"""The daemon with only the capabilities the systemd unit leaves it (CapabilityBoundingSet=, as
root with NoNewPrivileges, applied with setpriv): its kernel, process and log probes still work on
a real job whose logs sit in another user's private folder and whose /proc entries only a tracer
may read; without those capabilities the same daemon sees none of it (so the test can fail).
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

from tests.helpers import REPO, wait_for
from tests.jobkit import TrainJob

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="dropping capabilities from root needs root"),
              pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed (Debian package util-linux)")]

#: What the shipped unit keeps (CapabilityBoundingSet=), read from it.
(UNIT_CAPS,) = [tuple(m.split()) for m in re.findall(r"^CapabilityBoundingSet=(.*)$",
                                                     (REPO / "systemd" / "npu-watchdog.service").read_text(), re.M)]
#: Capability numbers (linux/capability.h) of the unit's set, for /proc/PID/status.
NUMBERS = {"CAP_DAC_READ_SEARCH": 2, "CAP_SYS_PTRACE": 19, "CAP_SYSLOG": 34}
NOBODY = 65534


def _wrapper(caps) -> tuple:
    spec = ",".join(["-all"] + [f"+{c[4:].lower()}" for c in caps])
    return ("setpriv", f"--bounding-set={spec}", f"--inh-caps={spec}", "--no-new-privs", "--")


def _config(job: TrainJob) -> dict:
    return {
        "job": {},
        "discovery": {"enabled": True, "only_env": job.only_env, "forget_after": "60s", "interval": "1s",
                      "feed": ["process", "logs", "heartbeat"]},
        "probes": {"process": {"interval": "1s"}, "logs": {"interval": "1s", "rescan": "1s"},
                   "heartbeat": {"interval": "1s"}, "kernel": {"enabled": True, "interval": "1s"}},
        "snapshots": {"enabled": False},
    }


def _effective_caps(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(re.search(r"^CapEff:\s*([0-9a-f]+)$", fh.read(), re.M).group(1), 16)


def _private_job(tmp_path) -> TrainJob:
    """A job (root, every capability) logging into a folder only another user may enter."""
    job = TrainJob(tmp_path / "j", ranks=2)
    os.chown(job.logs, NOBODY, NOBODY)
    os.chmod(job.logs, 0o700)
    return job


OOM = "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 1; 60.97 GiB total capacity)\n"


def _rules(d) -> set:
    return {f["rule"] for f in d.status()["findings"]}


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable")
def test_the_units_capabilities_are_enough_for_the_kernel_process_and_log_probes(tmp_path, make_daemon):
    job = _private_job(tmp_path)
    with job:
        d = make_daemon(_config(job), wrapper=_wrapper(UNIT_CAPS))
        assert _effective_caps(d.proc.pid) == sum(1 << NUMBERS[c] for c in UNIT_CAPS)
        wait_for(lambda: d.metrics().get('npu_watchdog_probe_up{probe="kernel"}') == 1, timeout=30,
                 what="the kernel probe reading /dev/kmsg")
        wait_for(lambda: any(k.startswith("npu_watchdog_job_ranks_alive{") and v == 2 for k, v in d.metrics().items()),
                 timeout=60, what="both ranks found (their environ read) and followed by the process probe")
        with open(job.logs / "rank1.log", "a") as fh:  # the rank's log, in the other user's folder
            fh.write(OOM)
        wait_for(lambda: "log_oom" in _rules(d), timeout=60, what="the OOM line read from the rank's log")
        for probe in ("kernel", "process", "logs"):
            assert d.metrics()[f'npu_watchdog_probe_up{{probe="{probe}"}}'] == 1, probe


def test_without_them_the_same_daemon_sees_nothing(tmp_path, make_daemon):
    job = _private_job(tmp_path)
    with job:
        d = make_daemon(_config(job), wrapper=_wrapper(()))
        assert _effective_caps(d.proc.pid) == 0
        # discovery has looked at the process table several times by now
        wait_for(lambda: d.metrics().get('npu_watchdog_probe_runs_total{probe="process"}', 0) >= 5, timeout=60,
                 what="five process probe rounds")
        before = d.metrics()['npu_watchdog_probe_runs_total{probe="logs"}']
        with open(job.logs / "rank1.log", "a") as fh:
            fh.write(OOM)
        wait_for(lambda: d.metrics()['npu_watchdog_probe_runs_total{probe="logs"}'] >= before + 5, timeout=60,
                 what="five log probe rounds after the line")
        m = d.metrics()
        assert not any(k.startswith("npu_watchdog_job_ranks_alive{") and v > 0 for k, v in m.items()), m
        assert "log_oom" not in _rules(d)
        if open("/proc/sys/kernel/dmesg_restrict").read().strip() == "1":
            wait_for(lambda: d.metrics().get('npu_watchdog_probe_up{probe="kernel"}') == 0, timeout=30,
                     what="the kernel probe down without CAP_SYSLOG")

"""A kernel line names a rank only when its pid and its command name are the rank's.

Any local user may name a process as they like (`prctl(PR_SET_NAME)`), for instance
`python3[4242] ` after a rank's pid, and run an invalid instruction: the kernel then writes
`traps: python3[4242] [31337] trap invalid opcode ...`. Before, the trap rule took the first
`[N] ` of the line and paged a critical `kernel_crash` for the healthy rank 4242. Real processes
and the machine's real /dev/kmsg: a real rank, a real other user's process trapping on `ud2`
(x86), then the rank's own real segfault as the control that attribution still works.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.hostile_kit import as_other_user
from tests.jobkit import TrainJob

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable"),
              pytest.mark.skipif(platform.machine() != "x86_64", reason="the invalid instruction is x86's ud2"),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play another user"),
              pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs /usr/bin/python3")]

#: Names itself argv[1] and executes ud2 from an executable page: a real `traps:` kernel line.
TRAP = """
import ctypes, mmap, sys
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(sys.argv[1].encode()), 0, 0, 0)
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(b"\\x0f\\x0b")
ctypes.CFUNCTYPE(None)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
"""


def config(job: TrainJob, hook: str) -> dict:
    return {
        "job": {},
        "discovery": {"enabled": True, "only_env": job.only_env, "forget_after": "60s", "interval": "1s",
                      "feed": ["process", "logs", "heartbeat"]},
        "probes": {"process": {"interval": "1s"}, "logs": {"interval": "1s", "rescan": "1s"},
                   "heartbeat": {"interval": "1s"}, "kernel": {"enabled": True, "interval": "1s"}},
        "alerting": {"group_window": "1s", "resolve_delay": "1m", "retry_initial": "300ms", "retry_max": "1s",
                     "channels": [{"type": "webhook", "name": "hook", "url": hook}]},
        "snapshots": {"enabled": False},
    }


def rank_pid(d, rank: int) -> int:
    def find():
        for j in d.status()["discovery"]["jobs"]:
            for r in j["ranks"]:
                if r["rank"] == rank:
                    return r["pid"]
        return None
    return wait_for(find, timeout=30, what=f"rank {rank} discovered")


def trap_as_other_user(name: str) -> int:
    """Run the other user's process named `name` until the kernel logged its trap; its pid.
    The kernel rate-limits these lines (printk_ratelimit), so a lost one is tried again."""
    for _ in range(5):
        p = subprocess.run(["/usr/bin/python3", "-c", TRAP, name], preexec_fn=as_other_user,
                           capture_output=True, timeout=60)
        assert p.returncode == -4, p  # SIGILL: the instruction really trapped
        pid = _pid_of_last_trap(name)
        if pid is not None:
            return pid
        time.sleep(6)
    raise AssertionError("the kernel logged none of five traps (rate limit?)")


def _pid_of_last_trap(name: str):
    found = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    needle = f"traps: {name}[".encode()
    try:
        while True:
            try:
                raw = os.read(fd, 16384)
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue
            if not raw:
                break
            msg = raw.split(b";", 1)[-1]
            if msg.startswith(needle) and b"] trap invalid opcode" in msg:
                found.append(int(msg[len(needle):].split(b"]", 1)[0]))
    finally:
        os.close(fd)
    return found[-1] if found else None


def traps_read(d) -> float:
    return sum(v for k, v in d.metrics().items()
               if k.startswith("npu_watchdog_kernel_matches_total{") and 'rule="kernel_trap"' in k)


def pages_about(rx, job: str):
    return [a for r in rx.accepted() if r.json["status"] == "firing"
            for a in r.json["alerts"] if a["labels"].get("training_job") == job]


def test_a_process_named_after_a_ranks_pid_that_traps_pages_nobody_for_the_rank(tmp_path, make_daemon):
    name = "impostor-job"
    job = TrainJob(tmp_path / "j", ranks=1, env={"NPU_WATCHDOG_JOB": name})
    with Receiver("webhook") as rx:
        d = make_daemon(config(job, rx.url))
        with job:
            wait_for(lambda: d.metrics().get(f'npu_watchdog_job_ranks_alive{{training_job="{name}"}}') == 1,
                     timeout=40, what="the rank followed")
            wait_for(lambda: d.metrics().get('npu_watchdog_probe_up{probe="kernel"}') == 1, timeout=20,
                     what="kernel probe up")
            pid = rank_pid(d, 0)
            comm = Path(f"/proc/{pid}/comm").read_text().rstrip("\n")
            # The rank's own name and pid, then a space, as the kernel would print them; when
            # the rank's name leaves no room (15 bytes), a short name with the rank's pid.
            impostor = f"{comm}[{pid}] " if len(comm) + len(str(pid)) + 3 <= 15 else f"r[{pid}] "
            traps_before = traps_read(d)
            other = trap_as_other_user(impostor)
            assert other != pid
            wait_for(lambda: traps_read(d) > traps_before, timeout=30, what="the trap line read by the daemon")
            time.sleep(4)  # a page for the rank would be sent within the group window (1 s)
            assert pages_about(rx, name) == [], pages_about(rx, name)
            assert not [f for f in d.status()["findings"]
                        if f["rule"] == "kernel_crash" and f["labels"].get("training_job") == name]
            # It is a node finding about the other user's process, paging nobody.
            node = [f for f in d.status()["findings"] if f["rule"] == "kernel_crash" and f"pid {other}:" in f["summary"]]
            assert node and all("rank" not in f["labels"] and f["severity"] == "info" for f in node), node
            # The control: the rank's own segfault is still the rank's page, exactly one.
            (job.ctl / "segv-0").touch()
            wait_for(lambda: pages_about(rx, name), timeout=40, what="the rank's own crash paged")
            time.sleep(4)
            pages = [r for r in rx.accepted() if r.json["status"] == "firing"
                     and any(a["labels"].get("training_job") == name for a in r.json["alerts"])]
            assert len(pages) == 1, pages
            text = json.dumps(pages[0].json)
            assert f"[{pid}]: segfault at" in text and str(other) not in text, text

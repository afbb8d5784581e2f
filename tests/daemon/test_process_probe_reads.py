"""The discovery-fed process probe on real processes: what it reads of each rank per round
(counted through the interpreter's audit hook, which sees every file Python opens), and that
ranks keep their meaning (identity, exec, stopped, zombie, gone)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from tests.helpers import wait_for
from watchdog.config import load_config_text
from watchdog.discovery.model import Discovered, JobInfo, RankInfo
from watchdog.probes.discovered import DiscoveredProcessProbe
from watchdog.probes.procinfo import follow
from watchdog.host.procstat import read_cmdline, read_stat

_opened: Optional[List[str]] = None
_hooked = False


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _opened is not None and isinstance(args[0], str) and args[0].startswith("/proc/"):
        _opened.append(args[0])


def opened_during(fn) -> List[str]:
    """The /proc files opened while `fn` runs (an audit hook cannot be removed: it stays, idle)."""
    global _opened, _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    _opened = []
    try:
        fn()
        return _opened
    finally:
        _opened = None


class Feed:
    """Discovery stand-in: the ranks it is told (a real scan reads every process on the node)."""

    def __init__(self, pids: Sequence[int]):
        self.pids = list(pids)
        #: pid -> the start time a scan reports (none by default).
        self.started: Dict[int, float] = {}

    def refresh(self) -> Discovered:
        ranks = tuple(RankInfo(rank=i, local_rank=i, pid=pid, npu=None, started_at=self.started.get(pid))
                      for i, pid in enumerate(self.pids))
        return Discovered(jobs=(JobInfo(name="job", launcher=None, world_size=len(ranks), local_world_size=len(ranks),
                                        ranks=ranks),) if ranks else ())

    def seen_since(self, mono: float, before: float = float("inf")) -> Tuple[JobInfo, ...]:
        return ()  # no other probe scans this stand-in


def sleepers(procs, n: int) -> List[subprocess.Popen]:
    out = [procs(["sleep", "600"]) for _ in range(n)]
    for p in out:
        wait_for(lambda: read_cmdline(p.pid) == ["sleep", "600"], what="exec of sleep")
    return out


def probe_for(pids: Sequence[int]) -> DiscoveredProcessProbe:
    return DiscoveredProcessProbe(load_config_text("discovery: {enabled: true}\n"), Feed(pids))


def by_pid(probe: DiscoveredProcessProbe) -> Dict[int, object]:
    return {p.pid: p for p in probe.collect().value.processes}


def test_a_settled_rank_costs_one_stat_and_one_statm_read_per_round(procs):
    ranks = sleepers(procs, 4)
    probe = probe_for([p.pid for p in ranks])
    first = opened_during(probe.collect)
    for p in ranks:  # new: its command line once
        assert sorted(f for f in first if f.startswith(f"/proc/{p.pid}/")) == [
            f"/proc/{p.pid}/cmdline", f"/proc/{p.pid}/stat", f"/proc/{p.pid}/statm"]
    for _ in range(3):
        opened = opened_during(probe.collect)
        # Nothing else (no /proc/stat for the boot time, no status, no second stat).
        assert sorted(opened) == sorted(f"/proc/{p.pid}/{name}" for p in ranks for name in ("stat", "statm"))
    infos = by_pid(probe)
    assert set(infos) == {p.pid for p in ranks}
    for p in ranks:
        info = infos[p.pid]
        assert (info.state, info.name, info.cmdline, info.job) == ("sleeping", "sleep", ("sleep", "600"), "job")
        assert info.rss_bytes > 0 and info.threads == 1 and info.cpu_delta is not None


EXEC_LATER = ("import os, sys\n"
              "sys.stdin.readline()\n"
              "os.execv('/bin/sleep', ['sleep', '600'])\n")


def test_a_rank_that_execs_is_read_again_once_and_stays_the_same_rank(procs):
    p = procs([sys.executable, "-c", EXEC_LATER], stdin=subprocess.PIPE)
    wait_for(lambda: read_cmdline(p.pid)[:1] == [sys.executable], what="python up")
    probe = probe_for([p.pid])
    before = by_pid(probe)[p.pid]
    assert before.cmdline[0] == sys.executable and before.name == read_stat(p.pid).comm
    p.stdin.write(b"go\n")
    p.stdin.flush()
    wait_for(lambda: read_cmdline(p.pid) == ["sleep", "600"], what="exec of sleep")
    opened = opened_during(lambda: by_pid(probe))
    assert sorted(opened) == [f"/proc/{p.pid}/cmdline", f"/proc/{p.pid}/stat", f"/proc/{p.pid}/statm"]
    after = by_pid(probe)[p.pid]
    assert (after.name, after.cmdline) == ("sleep", ("sleep", "600"))
    assert after.create_time == before.create_time and after.cpu_delta is not None  # the same rank


def test_stopped_and_zombie_ranks_stay_visible_then_a_reaped_one_is_gone(procs):
    a, b, c = sleepers(procs, 3)
    feed_pids = [a.pid, b.pid, c.pid]
    probe = probe_for(feed_pids)
    assert len(by_pid(probe)) == 3
    os.kill(b.pid, signal.SIGSTOP)
    os.kill(c.pid, signal.SIGKILL)  # not reaped: a zombie, which discovery no longer lists
    wait_for(lambda: read_stat(b.pid).state == "stopped" and read_stat(c.pid).state == "zombie", what="states")
    probe.feed.pids = [a.pid, b.pid]
    infos = by_pid(probe)
    assert (infos[a.pid].state, infos[b.pid].state, infos[c.pid].state) == ("sleeping", "stopped", "zombie")
    zombie = infos[c.pid]
    assert (zombie.cmdline, zombie.name, zombie.rss_bytes) == (("sleep", "600"), "sleep", 0)
    c.wait()  # reaped: gone
    obs = probe.collect().value
    assert {p.pid for p in obs.processes} == {a.pid, b.pid}
    assert [g.pid for g in obs.gone] == [c.pid]


def test_a_scan_still_listing_a_rank_on_its_way_out_keeps_the_run_and_its_gone_ranks(procs):
    """A whole-job kill: the ranks die a moment apart, and a scan can still list the last one (its
    command line is readable until it becomes a zombie) after the job was judged ended. That is
    the same run: its gone ranks stay (the job-level alerts name all of them), not a new run
    that starts afresh with one rank."""
    a, b, c = sleepers(procs, 3)
    probe = probe_for([a.pid, b.pid, c.pid])
    assert len(by_pid(probe)) == 3
    for p in (a, b):
        p.kill()
        p.wait()
    c.kill()  # not reaped: a zombie, so the job has ended
    wait_for(lambda: read_stat(c.pid).state == "zombie", what="zombie")
    probe.feed.pids = [c.pid]  # the late scan still lists it
    ended = probe.collect().value
    assert ended.jobs[0].ended_at is not None
    for _ in range(2):
        obs = probe.collect().value
        assert sorted(g.rank for g in obs.gone) == [0, 1] and [p.rank for p in obs.processes] == [2]
        assert obs.jobs[0].ended_at == ended.jobs[0].ended_at
    probe.feed.started = {c.pid: 12345.0}  # the same pid, another process (a reused pid)
    assert probe.collect().value.gone == ()  # a new run of the same name starts afresh


def test_identity_is_pid_and_start_time(procs):
    (p,) = sleepers(procs, 1)
    st = read_stat(p.pid)
    assert follow((p.pid, st.create_time)) == st
    assert follow((p.pid, st.create_time + 1.0)) is None  # another process under the same pid
    p.kill()
    p.wait()
    assert follow((p.pid, st.create_time)) is None


def test_the_end_evidence_loses_secrets_before_it_can_reach_a_page(tmp_path):
    """The failure and failure-shaped lines of an ended job's last lines go into its job_gone page:
    a secret printed on them (`WANDB_API_KEY=...`) is redacted first, as the cause's lines are."""
    from watchdog.probes.discovered import _Job

    log = tmp_path / "rank0.log"
    log.write_text("step 9\nRuntimeError: upload failed with WANDB_API_KEY=abcd1234efgh5678\n"
                   "RuntimeError: NPU out of memory. token=abcd1234efgh5678\n")
    probe = probe_for([])
    try:
        ev = probe._evidence(_Job(name="job", first_seen_at=0.0, expected=1, launcher_pid=None, logs={str(log)},
                                  uid=os.getuid()))
    finally:
        probe.close()
    assert "NPU out of memory" in ev.failure_line and "upload failed" in ev.shape_line, ev
    assert "abcd1234efgh5678" not in ev.failure_line + ev.shape_line
    assert "[REDACTED]" in ev.failure_line and "[REDACTED]" in ev.shape_line

"""A kernel record names a pid, and pids are reused (within minutes where pid_max is 32768, the
default of many kernels): a record written before the process now holding the pid started is
about an earlier process. It must not make that rank's clean end a failure, be that rank's cause
of death, or carry that rank's labels (a critical page for a rank the kernel never touched)."""

from __future__ import annotations

import time

from watchdog.config.schema import Config
from watchdog.detectors import kernel as kernel_detector
from watchdog.detectors.cause import cause_of_death
from watchdog.detectors.kernel import kernel_events_for_pids
from watchdog.detectors.liveness import _with_kernel_kill
from watchdog.observations import (EndEvidence, JobState, KernelEvent, KernelObservation, ProcessInfo,
                                   ProcessObservation)
from watchdog.core.state import StateStore

CFG = Config.model_validate({"node": {"name": "n1"}})
NOW = time.time()


def kill(pid: int, at: float) -> KernelEvent:
    return KernelEvent(seq=int(at), time=at, rule="kernel_oom_kill", category="oom", severity="critical",
                       title="killed by the kernel's OOM killer",
                       text=f"Memory cgroup out of memory: Killed process {pid} (python3)", pid=pid)


def rank(pid: int, r: int, started: float) -> ProcessInfo:
    return ProcessInfo(pid=pid, rank=r, state="running", create_time=started, cpu_seconds=0, cpu_delta=None,
                       rss_bytes=0, threads=1, job="j")


def view(events, running=(), gone=(), launcher=None, started=NOW - 3600):
    store = StateStore()
    store.started_at = started  # the daemon's start (records before it about no rank are history)
    store.put("kernel", KernelObservation(recent=tuple(events)))
    job = JobState(name="j", first_seen_at=NOW - 100, expected=None, ended_at=None, launcher_pid=launcher,
                   end=EndEvidence(ranks=2, gone=2))
    store.put("process", ProcessObservation(processes=tuple(running), gone=tuple(gone), discovered=True, jobs=(job,)))
    return store.view()


def test_a_record_older_than_the_process_holding_the_pid_is_not_about_it():
    old, new = kill(4242, NOW - 600), kill(4243, NOW - 5)
    v = view([old, new], gone=[rank(4242, 0, NOW - 60), rank(4243, 1, NOW - 60)])
    assert kernel_events_for_pids(v, [4242, 4243]) == (new,)
    # within the rounding of the two clocks it still counts
    edge = kill(4242, NOW - 61)
    assert kernel_events_for_pids(view([edge], gone=[rank(4242, 0, NOW - 60)]), [4242]) == (edge,)


def test_a_launcher_pid_is_bounded_by_its_ranks_start():
    v = view([kill(99, NOW - 600)], gone=[rank(4242, 0, NOW - 60)], launcher=99)
    assert kernel_events_for_pids(v, [4242, 99]) == ()
    fresh = kill(99, NOW - 1)
    assert kernel_events_for_pids(view([fresh], gone=[rank(4242, 0, NOW - 60)], launcher=99), [4242, 99]) == (fresh,)


def test_a_clean_end_stays_clean_and_no_cause_is_made_up():
    gone = [rank(4242, 0, NOW - 60), rank(4243, 1, NOW - 60)]
    v = view([kill(4242, NOW - 600)], gone=gone, launcher=77)
    obs = v.latest("process").value
    assert _with_kernel_kill(obs.jobs[0].end, obs, v).kernel_kill is None
    assert cause_of_death(v, CFG, [(4242, 0), (4243, 1)], "j") is None
    # the same record after the rank started is its cause and makes the end a failure
    v = view([kill(4242, NOW - 5)], gone=gone, launcher=77)
    obs = v.latest("process").value
    assert "Killed process 4242" in _with_kernel_kill(obs.jobs[0].end, obs, v).kernel_kill
    assert cause_of_death(v, CFG, [(4242, 0), (4243, 1)], "j").kind == "kernel"


def test_an_old_record_does_not_get_a_current_ranks_labels():
    cfg = Config.model_validate({"node": {"name": "n1"}, "probes": {"kernel": {"enabled": True}}})
    old = kernel_detector.detect(view([kill(4242, NOW - 600)], running=[rank(4242, 0, NOW - 60)]), cfg)
    assert [(f.rule, f.severity, "rank" in f.labels) for f in old] == [("kernel_oom", "info", False)]
    new = kernel_detector.detect(view([kill(4242, NOW - 5)], running=[rank(4242, 0, NOW - 60)]), cfg)
    assert [(f.rule, f.severity, f.labels.get("rank")) for f in new] == [("kernel_oom", "critical", "0")]


def test_a_record_from_before_the_daemon_started_about_no_watched_rank_is_not_an_incident():
    cfg = Config.model_validate({"node": {"name": "n1"}, "probes": {"kernel": {"enabled": True}}})
    other, mine = kill(5151, NOW - 600), kill(4242, NOW - 30)
    # started 60 s ago: the old kill of another process is history; the kill of a rank still counts
    found = kernel_detector.detect(view([other, mine], gone=[rank(4242, 0, NOW - 120)], started=NOW - 60), cfg)
    assert [(f.rule, f.labels.get("rank")) for f in found] == [("kernel_oom", "0")]
    # the same old kill read by a daemon that was already running then is recorded (info)
    found = kernel_detector.detect(view([other], started=NOW - 3600), cfg)
    assert [(f.rule, f.severity) for f in found] == [("kernel_oom", "info")]

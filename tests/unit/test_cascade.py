"""Cascade folding at the real time scale: an OOM's peers report HCCL timeouts only after the
job's HCCL_EXEC_TIMEOUT (1836 s by default), after the OOM's `hold` (30 min) has run out. The root
must stay in force while the job it broke is still broken, and the window must follow HCCL."""

from __future__ import annotations

from watchdog.detectors import logs as logs_det
from watchdog.parse.hccl import CANN_EXEC_TIMEOUT, resolve
from watchdog.observations import ProcessInfo, ProcessObservation
from watchdog.probes.logs import ActiveMatch, LogProbeObservation
from tests.synth import T0, Synth


def match(rule, category, role, rank, at, severity="critical"):
    return ActiveMatch(rule=rule, category=category, severity=severity, role=role, title=rule, rank=rank,
                       source="train", path=f"/logs/rank{rank}.log", first_at=at, last_at=at, count=1,
                       summary=f"{rule} line", evidence=(f"{rule} line",))


def proc(rank, created=T0 - 3600, env=()):
    return ProcessInfo(pid=1000 + rank, rank=rank, state="sleeping", create_time=created, cpu_seconds=1.0,
                       cpu_delta=0.0, rss_bytes=1, threads=1, hccl_env=tuple(env))


def synth():
    s = Synth(probes=("logs", "process"))
    return s


def oom_then_peers(s, hccl_after, alive, gone=(3,), env=()):
    oom = match("oom_torch_npu", "oom", "root", "3", T0)
    peers = [match("hccl_exec_timeout", "hccl", "cascade", str(r), T0 + hccl_after) for r in alive]
    tb = [match("python_traceback", "traceback", "cascade", str(r), T0 + hccl_after + 2, "warning") for r in alive]
    now = T0 + hccl_after + 60
    s.put("logs", LogProbeObservation(events=(), active=tuple([oom] + peers + tb)), now)
    s.put("process", ProcessObservation(processes=tuple(proc(r, env=env) for r in alive), expected=8,
                                        gone=tuple(proc(r) for r in gone), first_seen_at=T0 - 3600), now)
    return logs_det.detect(s.view(now), s.config)


def test_peers_timing_out_at_the_default_hccl_timeout_are_folded_into_the_oom():
    s = synth()
    assert s.config.probes.logs.hold < CANN_EXEC_TIMEOUT  # the shipped ratio that broke it
    out = oom_then_peers(s, CANN_EXEC_TIMEOUT, alive=[0, 1, 2, 4, 5, 6, 7])
    assert [f.rule for f in out] == ["log_oom"], [f.rule for f in out]
    assert len(out[0].details["symptoms"]) == 14


def test_the_window_follows_the_ranks_hccl_environment():
    s = synth()
    env = (("HCCL_EXEC_TIMEOUT", "5400"),)
    out = oom_then_peers(s, 5400, alive=[0, 1, 2, 4, 5, 6, 7], env=env)
    assert [f.rule for f in out] == ["log_oom"]
    # Without the environment, 5400 s is far outside the default window: the peers page.
    out = oom_then_peers(synth(), 5400, alive=[0, 1, 2, 4, 5, 6, 7])
    assert "log_hccl" in {f.rule for f in out}


def test_a_restarted_job_releases_the_old_root_after_its_hold():
    s = synth()
    oom = match("oom_torch_npu", "oom", "root", "3", T0)
    now = T0 + s.config.probes.logs.hold + 60
    s.put("logs", LogProbeObservation(events=(), active=(oom,)), now)
    s.put("process", ProcessObservation(processes=tuple(proc(r, created=T0 + 600) for r in range(8)), expected=8,
                                        first_seen_at=T0 - 3600), now)
    assert logs_det.detect(s.view(now), s.config) == []


def test_hccl_timeouts_env_then_config_then_cann_defaults():
    assert resolve([{"HCCL_EXEC_TIMEOUT": "900"}, {"HCCL_EXEC_TIMEOUT": "1200 "}], 60.0).exec_timeout == 1200
    assert resolve([{"HCCL_EXEC_TIMEOUT": "x"}], 60.0).source == "config"
    assert resolve([], None).exec_timeout == CANN_EXEC_TIMEOUT and resolve([], None).connect_timeout == 120
    assert resolve([{"HCCL_CONNECT_TIMEOUT": "600"}]).exec_timeout == CANN_EXEC_TIMEOUT


def test_a_later_failure_of_a_restarted_job_does_not_bring_an_old_root_back():
    """The OOM's job was restarted; later the new ranks all die (a card is lost): the old OOM,
    still remembered, must not come back in force and page again."""
    s = synth()
    oom = match("oom_torch_npu", "oom", "root", "3", T0)
    now = T0 + s.config.probes.logs.hold + 300
    s.put("logs", LogProbeObservation(events=(), active=(oom,)), now)
    s.put("process", ProcessObservation(processes=(), expected=8, first_seen_at=T0 - 3600,
                                        gone=tuple(proc(r, created=T0 + 600) for r in range(8))), now)
    assert logs_det.detect(s.view(now), s.config) == []
    # Whereas the ranks that ran at the OOM's time being gone keeps it in force.
    s.put("process", ProcessObservation(processes=(), expected=8, first_seen_at=T0 - 3600,
                                        gone=tuple(proc(r) for r in range(8))), now + 1)
    assert [f.rule for f in logs_det.detect(s.view(now + 1), s.config)] == ["log_oom"]

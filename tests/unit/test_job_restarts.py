"""Restarts are events: the agent's restart lines counted per job and cause by the logs probe (real
files, the real probe), and the `job_restarting` rule's thresholds (page at 3, again at 10)."""

from __future__ import annotations

from watchdog.config.load import load_config_text
from watchdog.detectors import restarts as restarts_det
from watchdog.parse.restarts import parse_restart
from watchdog.probes.logs import JobRestarts, LogProbeObservation, LogsProbe
from tests.synth import T0, Synth

AGENT = ("INFO:torch.distributed.elastic.agent.server.api:[default] Worker group FAILED. {left}/3 attempts left; "
         "will restart worker group")
HCCL = ("[ERROR] HCCL EI0002: The wait execution of the Notify register times out. Reason: the Notify register has "
        "not received the Notify record from remote rank: [0].")


def test_torch_elastic_restart_lines_are_numbered_from_the_attempts_left():
    first = parse_restart(AGENT.format(left=3))
    assert first is not None and (first.number, first.limit, first.state) == (1, 3, "FAILED")
    assert parse_restart(AGENT.format(left=1)).number == 3
    unhealthy = parse_restart("[default] Worker group UNHEALTHY. 2/2 attempts left; will restart worker group")
    assert unhealthy is not None and unhealthy.number == 1
    for line in ("[default] worker group successfully finished.", "Worker group FAILED. 0/3 attempts left",
                 "will restart worker group", "x" * 100000):
        assert parse_restart(line) is None, line


def _probe(tmp_path):
    cfg = load_config_text(
        f"probes: {{logs: {{enabled: true, sources: [{{name: train, paths: ['{tmp_path}/train.log']}}]}}}}")
    return LogsProbe(cfg.probes.logs, str(tmp_path / "state"))


def test_the_probe_counts_restarts_per_cause_the_line_before_each_restart(tmp_path):
    (tmp_path / "state").mkdir()
    log = tmp_path / "train.log"
    log.write_text("")
    p = _probe(tmp_path)
    p.collect()
    for left in (3, 2):  # two restarts after an HCCL timeout each, the line and the restart in one round
        with open(log, "a") as f:
            f.write(HCCL + "\n" + AGENT.format(left=left) + "\n")
        obs = p.collect().value
    (r,) = obs.restarts
    assert (r.cause, r.count, r.limit) == ("hccl_notify_wait_timeout", 2, 3)
    assert "EI0002" in r.cause_line and "will restart worker group" in r.line
    with open(log, "a") as f:  # a restart with no failure line since the previous one: unknown
        f.write(AGENT.format(left=1) + "\n")
    obs = p.collect().value
    assert sorted((r.cause, r.count) for r in obs.restarts) == [("hccl_notify_wait_timeout", 2), ("unknown", 1)]
    p.close()


def _restarts(s, count, last_at):
    r = JobRestarts(job=None, cause="hccl_notify_wait_timeout", cause_title="HCCL timeout", count=count,
                    first_at=T0, last_at=last_at, line="... will restart worker group", cause_line=HCCL, limit=20)
    s.put("logs", LogProbeObservation(events=(), restarts=(r,)), last_at)
    return restarts_det.detect(s.view(last_at), s.config)


def test_job_restarting_pages_at_the_third_restart_and_escalates_at_the_tenth():
    s = Synth(probes=("logs",))
    assert _restarts(s, 2, T0 + 10) == []
    (f,) = _restarts(s, 3, T0 + 20)
    assert f.rule == "job_restarting" and f.severity == "warning" and f.value == "3"
    assert f.labels["cause"] == "hccl_notify_wait_timeout" and "3 times" in f.summary
    assert [x.severity for x in _restarts(s, 9, T0 + 30)] == ["warning"]  # same alert, no new page
    assert [x.severity for x in _restarts(s, 10, T0 + 40)] == ["critical"]  # an escalation pages again
    assert _restarts(s, 1, T0) == []
    # It holds `hold` after the last restart, then resolves.
    hold = s.config.probes.logs.hold
    r = JobRestarts(job=None, cause="unknown", cause_title="", count=4, first_at=T0, last_at=T0, line="x")
    s.put("logs", LogProbeObservation(events=(), restarts=(r,)), T0 + hold + 1)
    assert restarts_det.detect(s.view(T0 + hold + 1), s.config) == []

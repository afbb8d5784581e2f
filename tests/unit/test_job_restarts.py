"""Restarts are events: the agent's restart lines counted per job and cause by the logs probe (real
files, the real probe), and the `job_restarting` rule's thresholds (page at 3, again at 10)."""

from __future__ import annotations

from watchdog.detectors import restarts as restarts_det
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import build_ruleset
from watchdog.parse.restarts import parse_restart
from watchdog.probes.logs import JobRestarts, LogProbeObservation
from tests.probe_kit import logs_probe
from tests.synth import T0, Synth

ENGINES = ("re", "re2") if re2_available() else ("re",)
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


#: DeepSpeed's elastic agent (deepspeed/elasticity/elastic_agent.py) through torch's logger: its
#: failed-group restart, and the restart after a peer node left while its own workers are fine.
DS_FAILED = ("INFO:deepspeed.elasticity.elastic_agent:[default] Worker group FAILED. 100/100 attempts left; "
             "will restart worker group")
DS_PEER_LEFT = "[default] Worker group HEALTHY. 99/100 attempts left; will restart worker group"


def test_deepspeed_elastic_agent_restarts_count_like_torch_elastic():
    first = parse_restart(DS_FAILED)
    assert first is not None and (first.launcher, first.number, first.limit, first.state) == ("deepspeed", 1, 100, "FAILED")
    peer = parse_restart(DS_PEER_LEFT)
    assert peer is not None and (peer.launcher, peer.number, peer.state) == ("deepspeed", 2, "HEALTHY")
    torch = parse_restart(AGENT.format(left=2))
    assert torch is not None and torch.launcher == "torchrun"


def test_lines_that_name_a_restart_option_or_a_finish_are_not_restarts():
    for line in (
        # A scale-up: both agents restart, and both say it does not count as a retry.
        "INFO:deepspeed.elasticity.elastic_agent:[default] Detected 1 new nodes from group_rank=0; will restart worker group",
        "INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. "
        "Waiting 300.0 seconds for other agents to finish.",
        "[2025-02-21 12:05:41,000] [INFO] [launch.py:351:main] Process 41237 exits successfully.",
        "  max_restarts     : 3",
        "TORCHELASTIC_MAX_RESTARTS=3 TORCHELASTIC_RESTART_COUNT=0",
        "torchrun --nproc_per_node=8 --max-restarts=3 pretrain.py",
        "msrun --worker_num=8 --local_worker_num=8 --master_port=8118 --join=True train.py",
        "[WARNING] ME(1234:281473,MainProcess):2025-01-01-00:00:00.000.000 [mindspore/parallel/cluster/"
        "process_entity/_api.py:1] Worker process 4321 exit with exception.",
        "[default] Worker group FAILED. 0/3 attempts left; will restart worker group",
    ):
        assert parse_restart(line) is None, line


def test_the_rule_reads_every_agent_restart_wording():
    """The probe counts a restart only on a `launcher_exit_report` line: the rule must match every
    wording the parser reads, and none of the near misses above."""
    for engine in ENGINES:
        m = Matcher(build_ruleset(), engine=engine)
        for line in (DS_FAILED, DS_PEER_LEFT, AGENT.format(left=1),
                     "[default] Worker group UNHEALTHY. 2/2 attempts left; will restart worker group"):
            assert [r.id for r in m.match_text(line)] == ["launcher_exit_report"], (engine, line)
        assert m.match_text("[default] Detected 1 new nodes from group_rank=0; will restart worker group") == []


def test_the_probe_counts_restarts_per_cause_the_line_before_each_restart(tmp_path):
    (tmp_path / "state").mkdir()
    log = tmp_path / "train.log"
    log.write_text("")
    p = logs_probe(tmp_path, "train.log")
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


def test_the_probe_counts_deepspeed_agent_restarts_per_cause(tmp_path):
    (tmp_path / "state").mkdir()
    log = tmp_path / "train.log"
    log.write_text("")
    p = logs_probe(tmp_path, "train.log")
    p.collect()
    for line in (DS_FAILED, DS_PEER_LEFT):
        with open(log, "a") as f:
            f.write(HCCL + "\n" + line + "\n")
        obs = p.collect().value
    (r,) = obs.restarts
    assert (r.cause, r.count, r.limit) == ("hccl_notify_wait_timeout", 2, 100)
    p.close()


def test_the_counts_are_saved_with_the_offsets_and_taken_back_by_the_next_daemon(tmp_path):
    (tmp_path / "state").mkdir()
    log = tmp_path / "train.log"
    log.write_text("")
    p = logs_probe(tmp_path, "train.log")
    p.collect()
    with open(log, "a") as f:
        f.write(HCCL + "\n" + DS_FAILED + "\n")
    (before,) = p.collect().value.restarts
    p.close()
    p2 = logs_probe(tmp_path, "train.log")
    (after,) = p2.collect().value.restarts
    assert after == before and after.count == 1
    with open(log, "a") as f:  # the next restart's cause is read since the restart before it
        f.write(DS_FAILED + "\n")
    got = {(r.cause, r.count) for r in p2.collect().value.restarts}
    assert got == {("hccl_notify_wait_timeout", 1), ("unknown", 1)}, got
    p2.close()


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
    assert f.since == T0  # since the first restart on the cause (the message's "since")
    assert [x.severity for x in _restarts(s, 9, T0 + 30)] == ["warning"]  # same alert, no new page
    assert [x.severity for x in _restarts(s, 10, T0 + 40)] == ["critical"]  # an escalation pages again
    assert _restarts(s, 1, T0) == []
    # It holds `hold` after the last restart, then resolves.
    hold = s.config.probes.logs.hold
    r = JobRestarts(job=None, cause="unknown", cause_title="", count=4, first_at=T0, last_at=T0, line="x")
    s.put("logs", LogProbeObservation(events=(), restarts=(r,)), T0 + hold + 1)
    assert restarts_det.detect(s.view(T0 + hold + 1), s.config) == []


def test_the_count_is_on_disk_with_the_offsets_past_its_line_without_a_clean_stop(tmp_path):
    """The offsets and the count are one write, made after the round's restarts are counted: a
    daemon killed (no close) right after the round that read a restart line keeps that restart.
    Before, the save inside the round wrote the offsets past the line with the older count."""
    (tmp_path / "state").mkdir()
    log = tmp_path / "train.log"
    log.write_text("")
    p = logs_probe(tmp_path, "train.log")
    p.collect()
    for _ in range(3):
        with open(log, "a") as f:
            f.write(HCCL + "\n" + DS_FAILED + "\n")
        p.collect()
    # killed here: no close()
    p2 = logs_probe(tmp_path, "train.log")
    assert [(r.cause, r.count) for r in p2.collect().value.restarts] == [("hccl_notify_wait_timeout", 3)]
    p2.close()


def test_saved_counts_of_odd_shape_or_from_the_future_are_not_taken_back(tmp_path):
    import json
    import time

    (tmp_path / "state").mkdir()
    (tmp_path / "train.log").write_text("")
    now = time.time()
    base = dict(job="j", cause="oom_torch_npu", cause_title="NPU OOM", count=3, first_at=now - 60, last_at=now - 30,
                line="... will restart worker group", cause_line="OOM", limit=5)
    rows = [dict(base, job="future", last_at=now + 30 * 86400), dict(base, job="nan_first", first_at=float("nan")),
            dict(base, job="inf_last", last_at=float("inf")), dict(base, job="bool_count", count=True),
            dict(base, job="backwards", first_at=now, last_at=now - 60), "a string", [1, 2], None,
            {"job": "partial"}, dict(base, job="good")]
    doc = {"version": 1, "files": {}, "saved_at": now, "extra": {"restarts": rows}}
    (tmp_path / "state" / "log-offsets.json").write_text(json.dumps(doc))
    p = logs_probe(tmp_path, "train.log")
    assert [r.job for r in p.collect().value.restarts] == ["good"]
    p.close()

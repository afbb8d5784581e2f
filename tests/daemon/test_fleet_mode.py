"""Fleet mode on the node (`alerting.mode: fleet`): the daemon's Alertmanager channel gets every
alert with `role` and `first_seen`; its chat channels only the node-local rules, whose
Alertmanager copies say `delivery="node"`. Real daemon, real HTTP receivers."""

from __future__ import annotations

import time

import pytest
import yaml

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.jobkit import TrainJob
from watchdog.config import ConfigError, load_config_text
from watchdog.relay.incident import parse_time


def flag_check(flag, name="flag"):
    return {"name": name, "argv": ["/bin/sh", "-c", f"test ! -e '{flag}'"], "interval": "1s", "timeout": "5s"}


def fleet_alerting(am_url, hook_url, **extra):
    al = {"mode": "fleet", "group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms",
          "retry_max": "1s", "channels": [
              {"type": "alertmanager", "name": "am", "url": am_url, "resend_interval": "1s", "alert_ttl": "30s"},
              {"type": "webhook", "name": "chat", "url": hook_url}]}
    al.update(extra)
    return al


def am_alerts(rx):
    return [a for r in rx.accepted() for a in r.json]


def test_fleet_mode_needs_an_alertmanager_channel():
    with pytest.raises(ConfigError, match="mode fleet needs a channel of type alertmanager"):
        load_config_text(yaml.safe_dump({"alerting": {"mode": "fleet", "channels": [
            {"type": "webhook", "name": "chat", "url": "http://127.0.0.1:1/x"}]}}))
    with pytest.raises(ConfigError, match="mode"):
        load_config_text(yaml.safe_dump({"alerting": {"mode": "cluster"}}))


def test_roles_follow_the_inhibitions():
    cfg = load_config_text("{}").alerting
    assert [cfg.role(r) for r in ("log_oom", "npu_missing", "npu_ecc_double_bit", "link_down")] == ["root"] * 4
    # An Alarm health code follows from a double-bit ECC error or a recurring fault code: a symptom.
    assert [cfg.role(r) for r in ("stall", "log_hccl", "heartbeat_stale", "rank_missing",
                                  "npu_unhealthy")] == ["symptom"] * 5
    custom = load_config_text(yaml.safe_dump({"alerting": {"inhibitions": [
        {"source": ["command_check"], "target": ["log_oom"]}]}})).alerting
    assert custom.role("log_oom") == "symptom" and custom.role("stall") == "root"


def test_fleet_daemon_pushes_role_and_first_seen_and_keeps_chat_quiet(tmp_path, make_daemon):
    flag = tmp_path / "flag"
    flag.touch()
    with Receiver("alertmanager") as am, Receiver("webhook") as chat:
        t0 = time.time()
        d = make_daemon({"node": {"name": "node-09"}, "job": {"name": "llm"},
                         "probes": {"commands": [flag_check(flag)]},
                         "alerting": fleet_alerting(am.url, chat.url)})
        am.wait_for(1, timeout=60)
        a = am_alerts(am)[0]
        assert a["labels"]["role"] == "root" and a["labels"]["host"] == "node-09"
        assert a["labels"]["training_job"] == "llm" and "delivery" not in a["labels"]
        seen = parse_time(a["annotations"]["first_seen"])
        assert seen is not None and t0 - 1 <= seen <= time.time()
        fired = parse_time(a["annotations"]["fired_at"])
        assert seen <= fired <= time.time()
        # startsAt is the push: an old one would make Alertmanager flush the job's group at once.
        assert fired <= parse_time(a["startsAt"]) <= time.time()
        m = d.metrics()
        key = 'npu_watchdog_alert_first_seen_timestamp_seconds{npu="",rank="",role="root",rule="command_check",training_job="llm"}'
        assert m[key] == pytest.approx(seen, abs=0.002)
        flag.unlink()
        wait_for(lambda: any(parse_time(x["endsAt"]) and parse_time(x["endsAt"]) <= time.time()
                             for x in am_alerts(am)), timeout=30, what="the resolve pushed")
        assert chat.requests == [], "chat must stay quiet in fleet mode"
        assert not [k for k in d.metrics() if k.startswith("npu_watchdog_alert_first_seen_timestamp_seconds")]


def test_fleet_local_rules_go_to_chat_and_are_marked_for_alertmanager(tmp_path, make_daemon):
    flag = tmp_path / "flag"
    flag.touch()
    with Receiver("alertmanager") as am, Receiver("webhook") as chat:
        make_daemon({"probes": {"commands": [flag_check(flag)]},
                     "alerting": fleet_alerting(am.url, chat.url, fleet_local_rules=["command_check"])})
        chat.wait_for(1, timeout=60)
        am.wait_for(1, timeout=60)
        assert chat.accepted()[0].json["alerts"][0]["labels"]["alertname"] == "command_check"
        assert am_alerts(am)[0]["labels"]["delivery"] == "node"


def test_job_level_alerts_carry_the_jobs_ranks_on_the_node(tmp_path, make_daemon):
    """A discovered job whose ranks leave apart: `job_gone` (no `rank` label) is pushed with the
    job's ranks on this node in the `ranks` annotation, which the relay counts."""
    job = TrainJob(tmp_path / "job", ranks=3, env={"NPU_WATCHDOG_JOB": "fleetjob"})
    with Receiver("alertmanager") as am, Receiver("webhook") as chat, job:
        make_daemon({"node": {"name": "node-03"}, "job": {},
                     "discovery": {"enabled": True, "only_env": job.only_env, "interval": "1s", "end_window": "2s",
                                   "feed": ["process", "logs"]},
                     "probes": {"process": {"interval": "1s"}, "logs": {"interval": "1s"}},
                     "alerting": fleet_alerting(am.url, chat.url)})
        wait_for(lambda: am_alerts(am) == [] and job.rank_pids() and time.sleep(3) is None, timeout=30,
                 what="ranks followed")
        job.exit_rank(1)
        wait_for(lambda: [a for a in am_alerts(am) if a["labels"]["alertname"] == "rank_missing"], timeout=60,
                 what="rank_missing pushed")
        job.stop()
        gone = wait_for(lambda: [a for a in am_alerts(am) if a["labels"]["alertname"] == "job_gone"], timeout=60,
                        what="job_gone pushed")
        assert "rank" not in gone[-1]["labels"] and gone[-1]["labels"]["training_job"] == "fleetjob"
        assert gone[-1]["annotations"]["ranks"] == "0,1,2"
        missing = [a for a in am_alerts(am) if a["labels"]["alertname"] == "rank_missing"][-1]
        assert missing["labels"]["rank"] == "1" and "ranks" not in missing["annotations"]

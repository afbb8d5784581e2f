"""The alert engine in-process against a real local webhook receiver, on a fake clock.

The engine takes its time from an injected clock and runs no timer thread here: the driver
advances the clock and calls `process`/`tick` like detector passes and the timer would, so no
test sleeps. Delivery is real (the outbox's threads post to a local HTTP receiver); `settle` waits
until the outbox is empty before a test counts messages.
"""

from __future__ import annotations

import time

import pytest

from tests.fakes.receivers import Receiver
from tests.alertkit import BASE, Clock, Driver, f, make_config, open_engine, settle
from tests.helpers import wait_for
from watchdog.alerting.deliver.store import AlertStore
from watchdog.core.rulecatalog import release_hold

@pytest.fixture
def rx():
    with Receiver("webhook") as r:
        yield r


@pytest.fixture
def engines():
    made = []
    yield made
    for e in made:
        try:
            e.close()
        except Exception:
            pass


def new_engine(engines, cfg, snapshots=None, clock=None):
    e = open_engine(cfg, clock=clock or Clock(), snapshots=snapshots)
    engines.append(e)
    return e


def test_eight_idle_devices_are_one_message_and_resolve_once(tmp_path, rx, engines):
    e = new_engine(engines, make_config(tmp_path, rx.url))
    d = Driver(e)
    idle = [f("npu_idle", npu=str(i), chip="0") for i in range(8)]
    d.hold(idle[:3], 0.4)
    d.hold(idle, 1.5)  # the other five join within the group window
    msgs = rx.wait_for(1)
    assert len(msgs) == 1
    body = msgs[0].json
    assert body["status"] == "firing" and len(body["alerts"]) == 8
    assert sorted(a["labels"]["npu"] for a in body["alerts"]) == [str(i) for i in range(8)]
    assert body["groupLabels"] == BASE and body["commonLabels"]["alertname"] == "npu_idle"
    d.hold([], 1.5)
    msgs = rx.wait_for(2)
    assert msgs[1].json["status"] == "resolved" and len(msgs[1].json["alerts"]) == 8
    assert all(a["endsAt"] != "0001-01-01T00:00:00Z" for a in msgs[1].json["alerts"])


def test_flapping_finding_gives_one_alert(tmp_path, rx, engines):
    e = new_engine(engines, make_config(tmp_path, rx.url, resolve_delay="1500ms"))
    x = f("heartbeat_stale", rank="0")
    for _ in range(8):  # present, absent, present... every 0.25s, for 4s
        e.process([x])
        e.clock.now += 0.25
        e.process([])
        e.clock.now += 0.25
    Driver(e).hold([], 1.8)  # now it is really gone
    msgs = rx.wait_for(2)
    assert [m.json["status"] for m in msgs] == ["firing", "resolved"]


def test_for_duration_keeps_short_blips_quiet(tmp_path, rx, engines):
    e = new_engine(engines, make_config(tmp_path, rx.url, **{"for": {"npu_low_util": "2s"}}))
    d = Driver(e)
    d.hold([f("npu_low_util", npu="1")], 0.8)
    d.hold([f("stall")], 2.0)  # the blip is gone; a sentinel alert proves the engine sends
    msgs = rx.wait_for(1)
    rules = {a["labels"]["alertname"] for m in msgs for a in m.json["alerts"]}
    assert rules == {"stall"}


def test_root_cause_inhibits_symptoms(tmp_path, rx, engines):
    e = new_engine(engines, make_config(tmp_path, rx.url))
    d = Driver(e)
    d.hold([f("npu_missing", "critical", npu="3"), f("stall", "critical"), f("log_hccl", log_rule="hccl_timeout"),
            f("rank_missing", "critical", rank="2"), f("heartbeat_stale", rank="2"), f("heartbeat_stale", rank="5")], 1.8)
    msgs = rx.wait_for(1)
    sent = sorted((a["labels"]["alertname"], a["labels"].get("rank", "")) for m in msgs for a in m.json["alerts"])
    # A lost card explains the rank it killed and every job-level symptom (same host+job).
    assert sent == [("npu_missing", "")]
    states = {a.rule + a.labels.get("rank", ""): a.muted for a in e.alert_states()}
    assert states["stall"] in ("inhibited:npu_missing", "inhibited:rank_missing")


def test_inhibited_symptom_is_sent_when_the_cause_clears(tmp_path, rx, engines):
    e = new_engine(engines, make_config(tmp_path, rx.url))
    d = Driver(e)
    d.hold([f("log_oom", "critical", log_rule="npu_oom"), f("stall", "critical")], 1.5)
    assert [a["labels"]["alertname"] for a in rx.wait_for(1)[0].json["alerts"]] == ["log_oom"]
    d.hold([f("stall", "critical")], 2.0)
    settle(e)
    # The cause resolved; the stall, still there, waits two rounds of its probes (the release hold:
    # the round that saw the cause go may not have seen the symptom go), then pages on its own.
    assert [(m.json["status"], m.json["alerts"][0]["labels"]["alertname"]) for m in rx.wait_for(2)[1:]] \
        == [("resolved", "log_oom")]
    hold = release_hold("stall", e.config)
    assert hold > 2.0
    d.hold([f("stall", "critical")], hold - 2.0)  # the release came with the resolution, within the 2 s
    settle(e)
    assert len(rx.requests) == 2, "paged before its release hold ended"
    d.hold([f("stall", "critical")], 3.0)
    msgs = rx.wait_for(3)
    kinds = sorted((m.json["status"], m.json["alerts"][0]["labels"]["alertname"]) for m in msgs[1:])
    assert kinds == [("firing", "stall"), ("resolved", "log_oom")]


def test_silence_mutes_and_its_end_sends_what_still_fires(tmp_path, rx, engines):
    cfg = make_config(tmp_path, rx.url)
    e = new_engine(engines, cfg)
    store = AlertStore(cfg.paths.state_dir)  # like `npu-watchdog silence add` from another process
    now = e.clock.now
    s = store.add_silence(["rule=stall", "training_job=job-a"], now, now + 2.5, "tester", "maintenance")
    d = Driver(e)
    d.hold([f("stall", "critical"), f("command_check", check="fs")], 1.6)
    first = rx.wait_for(1)
    assert [a["labels"]["alertname"] for a in first[0].json["alerts"]] == ["command_check"]
    assert e.silences_active() == 1
    assert any(a.muted == f"silenced:{s.id}" for a in e.alert_states())
    d.hold([f("stall", "critical"), f("command_check", check="fs")], 2.0)  # the silence expires meanwhile
    msgs = rx.wait_for(2)
    assert [a["labels"]["alertname"] for a in msgs[1].json["alerts"]] == ["stall"]
    assert e.silences_active() == 0
    store.close()


def test_reminders_repeat_while_firing(tmp_path, rx, engines):
    e = new_engine(engines, make_config(tmp_path, rx.url, reminder="1s"))
    d = Driver(e)
    d.hold([f("loss_nan", "critical", rank="0")], 3.4)
    msgs = rx.wait_for(3)
    assert msgs[0].json["kind"] == "firing" and {m.json["kind"] for m in msgs[1:]} == {"reminder"}


def test_restart_neither_repages_nor_forgets(tmp_path, rx, engines):
    cfg = make_config(tmp_path, rx.url)
    x = f("job_gone", "critical")
    e = new_engine(engines, cfg)
    Driver(e).hold([x], 1.5)
    rx.wait_for(1)
    e.close()
    e2 = new_engine(engines, cfg, clock=e.clock)
    e2.round_complete()  # every probe has run once: the detectors' warm-up starts
    assert [a.state for a in e2.alert_states()] == ["firing"]
    Driver(e2).hold([x], 1.5)
    Driver(e2).hold([], 1.5)
    settle(e2)
    assert len(rx.requests) == 1, "held after the restart: no resolve before the detector warmed up"
    # job_gone's detector needs process.start_grace (and two rounds) of fresh evidence after a start.
    from watchdog.core.rulecatalog import warmup
    assert warmup("job_gone", cfg, x.to_dict()) >= cfg.probes.process.start_grace
    Driver(e2).hold([], warmup("job_gone", cfg, x.to_dict()) + 3.0, step=1.0)
    msgs = rx.wait_for(2)
    assert [m.json["status"] for m in msgs] == ["firing", "resolved"]


@pytest.mark.parametrize("rule,labels", [("stall", {}), ("log_nan", {"log_rule": "loss_nan", "rank": "0"})])
def test_restart_while_firing_holds_until_the_detector_is_warm(tmp_path, rx, engines, rule, labels):
    """A restored alert whose detector has not re-evidenced it yet is neither resolved nor re-paged;
    when the detector reports it again within its warm-up, it simply stays firing."""
    cfg = make_config(tmp_path, rx.url, resolve_delay="5s")
    x = f(rule, "critical", **labels)
    e = new_engine(engines, cfg)
    Driver(e).hold([x], 1.5)
    rx.wait_for(1)
    e.close()
    e2 = new_engine(engines, cfg, clock=e.clock)
    from watchdog.core.rulecatalog import warmup
    held = warmup(rule, cfg, x.to_dict())
    assert held > cfg.alerting.resolve_delay, "the warm-up outlasts the resolve delay"
    # The probes take their time before their first complete round (a loaded machine): the warm-up
    # counts from there, so a long first round never turns into a false resolve.
    Driver(e2).hold([], held + cfg.alerting.resolve_delay + 1.0, step=0.5)
    e2.round_complete()
    Driver(e2).hold([], held - 1.0, step=0.5)  # nothing seen yet: the detector is rebuilding its evidence
    Driver(e2).hold([x], 30.0, step=1.0)  # seen again
    settle(e2)
    assert [m.json["status"] for m in rx.requests] == ["firing"], [m.json["status"] for m in rx.requests]
    Driver(e2).hold([], 6.0)
    msgs = rx.wait_for(2)
    assert [m.json["status"] for m in msgs] == ["firing", "resolved"]


def test_routing_by_severity_and_matchers(tmp_path, engines):
    with Receiver("webhook") as crit, Receiver("webhook") as hccl:
        cfg = make_config(tmp_path, crit.url, channels=[
            {"type": "webhook", "name": "oncall", "url": crit.url, "min_severity": "critical"},
            {"type": "webhook", "name": "net", "url": hccl.url, "min_severity": "info",
             "matchers": ["rule=~log_.*", "log_rule!=ignored"]},
        ], inhibitions=[])
        e = new_engine(engines, cfg)
        Driver(e).hold([f("stall", "critical"), f("log_hccl", "warning", log_rule="hccl_timeout"),
                        f("log_hccl", "warning", log_rule="ignored")], 1.8)
        a = crit.wait_for(1)
        b = hccl.wait_for(1)
        assert [x["labels"]["alertname"] for x in a[0].json["alerts"]] == ["stall"]
        assert [x["labels"]["log_rule"] for x in b[0].json["alerts"]] == ["hccl_timeout"]


def test_symptom_that_cleared_with_its_cause_is_not_paged(tmp_path, rx, engines):
    """A stall held back by an OOM, gone by the time the OOM resolves, never pages on its own."""
    e = new_engine(engines, make_config(tmp_path, rx.url))
    d = Driver(e)
    d.hold([f("log_oom", "critical", log_rule="npu_oom"), f("stall", "critical")], 1.5)
    assert [a["labels"]["alertname"] for a in rx.wait_for(1)[0].json["alerts"]] == ["log_oom"]
    # The root clears first, the symptom half a second later (as a stall clears before the last
    # stale heartbeat is rewritten); when the root resolves the symptom is still within its own
    # resolve_delay, i.e. already absent: it must not be paged then.
    d.hold([f("stall", "critical")], 0.6)
    d.hold([], 3.0)
    msgs = rx.wait_for(2)
    settle(e)
    kinds = [(m.json["status"], a["labels"]["alertname"]) for m in rx.requests[1:] for a in m.json["alerts"]]
    assert kinds == [("resolved", "log_oom")], kinds
    assert msgs


class RecordingTaker:
    """A snapshot taker that records what it was asked for (the real one is tested on its own)."""

    def __init__(self):
        self.asked = []

    def request(self, finding):
        self.asked.append(finding.rule)
        return f"/snapshots/{finding.rule}.tar.gz"

    def close(self):
        pass


def test_snapshots_only_for_alerts_that_are_sent(tmp_path, rx, engines):
    taker = RecordingTaker()
    e = new_engine(engines, make_config(tmp_path, rx.url), snapshots=taker)
    d = Driver(e)
    d.hold([f("log_oom", "critical", log_rule="npu_oom")], 0.3)
    d.hold([f("log_oom", "critical", log_rule="npu_oom"), f("stall", "critical")], 1.5)
    (msg,) = rx.wait_for(1)
    assert [a["annotations"]["snapshot"] for a in msg.json["alerts"]] == ["/snapshots/log_oom.tar.gz"]
    assert taker.asked == ["log_oom"], "the inhibited stall must not run a capture"
    # The root clears, the stall is still there: it is released, captured, then sent with its path
    # (after its release hold).
    d.hold([f("stall", "critical")], 2.0 + release_hold("stall", e.config))
    msgs = rx.wait_for(3)
    stall = [a for m in msgs[1:] for a in m.json["alerts"] if a["labels"]["alertname"] == "stall"]
    assert stall and stall[0]["annotations"]["snapshot"] == "/snapshots/stall.tar.gz"
    assert taker.asked == ["log_oom", "stall"]


def test_a_muted_alert_does_not_cut_the_group_window_short(tmp_path, rx, engines):
    """Findings arriving while an inhibited symptom sits in the group still wait for each other."""
    e = new_engine(engines, make_config(tmp_path, rx.url))
    d = Driver(e)
    root, muted = f("log_oom", "critical", log_rule="npu_oom"), f("stall", "critical")
    d.hold([root, muted], 1.5)
    assert len(rx.wait_for(1)) == 1
    d.hold([root, muted, f("loss_nan", "critical", rank="0")], 0.4)
    d.hold([root, muted, f("loss_nan", "critical", rank="0"), f("loss_nan", "critical", rank="1")], 1.5)
    msgs = rx.wait_for(2)
    settle(e)
    assert len(rx.requests) == 2, [[a["labels"] for a in m.json["alerts"]] for m in rx.requests]
    assert sorted(a["labels"]["rank"] for a in msgs[1].json["alerts"]) == ["0", "1"]


def test_symptom_firing_in_the_same_pass_as_its_root_runs_no_capture(tmp_path, rx, engines):
    taker = RecordingTaker()
    e = new_engine(engines, make_config(tmp_path, rx.url), snapshots=taker)
    # rank_missing sorts before log_oom and fires in the same pass; the OOM explains it.
    Driver(e).hold([f("rank_missing", "critical", rank="3"), f("log_oom", "critical", log_rule="npu_oom")], 1.5)
    (msg,) = rx.wait_for(1)
    assert [a["labels"]["alertname"] for a in msg.json["alerts"]] == ["log_oom"]
    assert taker.asked == ["log_oom"]


@pytest.mark.parametrize("order", ["heartbeat_first", "log_first", "same_pass"])
def test_one_nan_seen_by_two_probes_pages_once(tmp_path, rx, engines, order):
    """loss_nan (heartbeat) and log_nan (log line) are one event: whichever fires first pages, the
    other is folded, in every arrival order; it resolves once."""
    e = new_engine(engines, make_config(tmp_path, rx.url, group_window="2s"))
    d = Driver(e)
    hb = [f("loss_nan", "critical", rank=str(r)) for r in range(8)]
    lg = [f("log_nan", "critical", rank=str(r), log_rule="loss_nan") for r in range(8)]
    first, second = (hb, lg) if order == "heartbeat_first" else (lg, hb)
    if order == "same_pass":
        d.hold(hb + lg, 10.0)
    else:
        d.hold(first, 3.0)  # the first probe's alert has paged by now
        d.hold(first + second, 10.0)
    d.hold([], 3.0)
    settle(e)
    got = [(m.json["status"], sorted({a["labels"]["alertname"] for a in m.json["alerts"]})) for m in rx.requests]
    assert [g[0] for g in got] == ["firing", "resolved"], got
    assert len(got[0][1]) == 1 and got[0][1] == got[1][1], got
    assert len(rx.requests[0].json["alerts"]) == 8


def test_npu_smi_failure_and_probe_down_page_once(tmp_path, rx, engines):
    """Even if both reach the engine, the generic probe_down of the NPU probe is npu-smi's symptom."""
    e = new_engine(engines, make_config(tmp_path, rx.url, **{"for": {"probe_down": "0s"}}))
    d = Driver(e)
    d.hold([f("probe_down", "critical", probe="npu")], 0.4)
    d.hold([f("probe_down", "critical", probe="npu"), f("npu_smi_failing", "critical", probe="npu"),
            f("probe_down", "warning", probe="logs")], 3.0)
    settle(e)
    sent = sorted((a["labels"]["alertname"], a["labels"]["probe"]) for m in rx.requests for a in m.json["alerts"])
    assert sent == [("npu_smi_failing", "npu"), ("probe_down", "logs")], sent


def test_first_page_does_not_wait_for_a_long_window(tmp_path, rx, engines):
    """At the shipped default the first message of an event leaves within a few seconds."""
    from watchdog.config.sections.alerting import AlertingConfig

    window = AlertingConfig().group_window
    assert window <= 3.0
    e = new_engine(engines, make_config(tmp_path, rx.url, group_window=f"{window}s"))
    start = e.clock.now
    d = Driver(e)
    for _ in range(50):
        d.hold([f("log_oom", "critical", log_rule="npu_oom", rank="3")], 0.2)
        if e.outbox.stats()[0] or rx.requests:
            break
    assert e.clock.now - start <= window + 0.5


def test_an_incident_resolves_once_when_its_last_alert_clears(tmp_path, rx, engines):
    """Alerts sent in one message clear at different times (ranks resume one by one, log holds end
    apart): one resolved message when the last has cleared, even across a restart meanwhile."""
    cfg = make_config(tmp_path, rx.url)
    e = new_engine(engines, cfg)
    d = Driver(e)
    nans = [f("loss_nan", "critical", rank=str(r)) for r in range(4)]
    d.hold(nans, 2.0)
    assert len(rx.wait_for(1)) == 1
    d.hold(nans[2:], 3.0)  # ranks 0 and 1 are fine again: resolved, waiting for the others
    d.hold(nans[3:], 3.0)
    e.close()
    e2 = new_engine(engines, cfg, clock=e.clock)
    e2.round_complete()  # every probe has run once: the detectors' warm-up starts
    Driver(e2).hold(nans[3:], 1.0)
    from watchdog.core.rulecatalog import warmup
    Driver(e2).hold([], warmup("loss_nan", cfg, nans[3].to_dict()) + 3.0, step=0.5)
    settle(e2)
    got = [(m.json["status"], len(m.json["alerts"])) for m in rx.requests]
    assert got == [("firing", 4), ("resolved", 4)], got


def test_interleaved_nan_ranks_and_the_longer_log_hold_page_and_resolve_once(tmp_path, rx, engines):
    """As seen in the demo: six ranks' loss_nan, then every rank's log_nan, then two late ranks'
    loss_nan; the heartbeat clears first while the log lines hold longer. One page, one resolve."""
    e = new_engine(engines, make_config(tmp_path, rx.url, group_window="3s", resolve_delay="2s"))
    d = Driver(e)
    hb = [f("loss_nan", "critical", rank=str(r)) for r in range(8)]
    lg = [f("log_nan", "critical", rank=str(r), log_rule="loss_nan") for r in range(8)]
    d.hold(hb[:6], 0.2)
    d.hold(hb[:6] + lg, 0.6)
    d.hold(hb + lg, 5.0)
    d.hold(lg, 8.0)  # the heartbeat is fine again; the log match holds on
    d.hold([], 4.0)
    settle(e)
    got = [(m.json["status"], sorted({a["labels"]["alertname"] for a in m.json["alerts"]})) for m in rx.requests]
    assert got == [("firing", ["loss_nan"]), ("resolved", ["loss_nan"])], got


@pytest.mark.parametrize("own", [("log_offsets_unsaved", "warning", {}),
                                 ("probe_down", "critical", {"probe": "heartbeat"}),
                                 ("npu_smi_failing", "critical", {})])
def test_a_watchdog_self_alert_never_rides_with_a_training_alert(tmp_path, rx, engines, own):
    """The watchdog's own trouble (offsets unsaved, a probe down, npu-smi failing) and a NaN fire
    in one group window: two messages, and each resolves on its own (the watchdog's alert does not
    wait for the NaN's hold, nor the NaN for the watchdog)."""
    rule, sev, labels = own
    e = new_engine(engines, make_config(tmp_path, rx.url, **{"for": {rule: "0s"}}))
    d = Driver(e)
    mine = f(rule, sev, **labels)
    nan = f("log_nan", "critical", rank="0", log_rule="loss_nan")
    d.hold([nan], 0.4)
    d.hold([nan, mine], 2.0)  # within the NaN's group window
    d.hold([nan], 3.0)  # the watchdog's trouble is over; the NaN line still holds
    settle(e)
    got = [(m.json["status"], sorted(a["labels"]["alertname"] for a in m.json["alerts"])) for m in rx.requests]
    assert sorted(got[:2]) == [("firing", ["log_nan"]), ("firing", [rule])], got
    assert got[2:] == [("resolved", [rule])], got
    d.hold([], 3.0)
    settle(e)
    got = [(m.json["status"], sorted(a["labels"]["alertname"] for a in m.json["alerts"])) for m in rx.requests]
    assert got[3:] == [("resolved", ["log_nan"])], got


def _immutable(path, on: bool) -> None:
    """Root ignores permission bits; the immutable flag stops it from creating SQLite's journal."""
    import subprocess

    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr refused: {done.stderr.decode(errors='replace').strip()}")


def test_a_failed_commit_rolls_the_pass_back_and_the_page_goes_out_once_when_writable(tmp_path, rx, engines):
    """The pass whose commit fails leaves the memory as it was: the alert is not marked as sent,
    so it is paged (once) by the first pass that can commit; its `for` counts from the first
    sighting; `state_unwritable` goes out from memory while the folder cannot be written."""
    cfg = make_config(tmp_path, rx.url, **{"for": {"job_gone": "2s"}})
    e = new_engine(engines, cfg)
    x = f("job_gone", "critical")
    Driver(e).hold([], 0.4)  # the store is written once (nothing to say yet)
    _immutable(tmp_path / "state", True)
    try:
        Driver(e).hold([x], 3.0)
        assert [a.state for a in e.alert_states()] == [], "nothing of a rolled-back pass stays in memory"
        health = e.storage_health()
        assert not health.writable and health.errors_total >= 10 and "unable to open" in health.error
        assert [g.rule for g in e.current()] == ["job_gone", "state_unwritable"]
        [sent] = rx.wait_for(1)
        assert sent.json["status"] == "firing" and sent.json["alerts"][0]["labels"]["alertname"] == "state_unwritable"
        assert "job_gone" in sent.json["alerts"][0]["annotations"]["log_lines"]  # what is held
    finally:
        _immutable(tmp_path / "state", False)
    e.process([x])  # its `for` counted from the first sighting: it fires at once
    assert [(a.rule, a.state) for a in e.alert_states()] == [("job_gone", "firing")]
    assert e.storage_health().writable
    Driver(e).hold([x], 1.2)  # the group window
    assert [(a.rule, a.state, a.notified) for a in e.alert_states()] == [("job_gone", "firing", True)]
    msgs = rx.wait_for(3)
    Driver(e).hold([x], 1.0)
    settle(e)
    got = [(m.json["status"], m.json["alerts"][0]["labels"]["alertname"]) for m in rx.accepted()]
    assert sorted(got) == [("firing", "job_gone"), ("firing", "state_unwritable"), ("resolved", "state_unwritable")]
    assert len(msgs) == len(rx.requests) == 3
    assert [a.fp for a in AlertStore(str(tmp_path / "state")).load_alerts().values()] == [x.key]


def test_a_database_deleted_under_the_engine_is_recreated_with_its_content(tmp_path, rx, engines):
    """The deleted file lives on while open: its alerts and silences are copied into a new
    private file in a re-created folder, and the page of the next pass goes out once."""
    import os
    import shutil
    import stat as st

    cfg = make_config(tmp_path, rx.url)
    e = new_engine(engines, cfg)
    old = f("job_gone", "critical")
    Driver(e).hold([old], 1.5)
    rx.wait_for(1)
    settle(e)  # the send is booked as done before the folder goes (else it is, rightly, sent again)
    e.store.add_silence(["rule=npu_idle"], e.clock(), e.clock() + 3600, "me", "kept")
    shutil.rmtree(tmp_path / "state")
    new = f("log_oom", "critical", rank="3")
    Driver(e).hold([old, new], 1.5)
    settle(e)
    assert [m.json["alerts"][0]["labels"]["alertname"] for m in rx.wait_for(2)] == ["job_gone", "log_oom"]
    assert st.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    assert st.S_IMODE(os.stat(tmp_path / "state" / "alerting.sqlite3").st_mode) == 0o600
    copy = AlertStore(str(tmp_path / "state"))
    assert sorted(copy.load_alerts()) == sorted([old.key, new.key])
    assert [s.comment for s in copy.silences()] == ["kept"]
    assert e.storage_health().writable and e.storage_health().errors_total == 0


def test_state_unwritable_is_sent_again_to_alertmanager_while_it_lasts(tmp_path, engines):
    """Alertmanager forgets an alert after its alert_ttl unless it is sent again: the episode's
    alert (sent from memory) is refreshed every resend_interval, then resolved once."""
    def resolved(r) -> bool:  # a firing alert ends an hour (alert_ttl) from now; a resolved one now
        return r.json[0]["endsAt"] < time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 600))

    with Receiver("alertmanager") as am:
        ch = {"type": "alertmanager", "name": "am", "url": am.url, "min_severity": "info",
              "resend_interval": "1s", "alert_ttl": "1h"}
        e = new_engine(engines, make_config(tmp_path, am.url, channels=[ch]))
        Driver(e).hold([], 0.4)
        _immutable(tmp_path / "state", True)
        try:
            Driver(e).hold([f("job_gone", "critical")], 3.2)
            am.wait_for(3)
        finally:
            _immutable(tmp_path / "state", False)
        e.tick()
        wait_for(lambda: any(resolved(r) for r in am.accepted()), what="the resolve")
        got = am.accepted()
        assert {a["labels"]["alertname"] for r in got for a in r.json} == {"state_unwritable"}
        assert [resolved(r) for r in got] == [False] * (len(got) - 1) + [True]
        assert 4 <= len(got) <= 6, len(got)  # the first, a refresh a second for ~3 s, the resolve

"""The alert engine's pure core, driven directly: findings and a time in, typed notifications out.

No thread, no sleep, no database, no network: the time is only the argument each pass is given,
the silences are data, the channels are built from the config and never contacted, and the
snapshot requester is a recording stand-in. The shell around the core (its timer, the SQLite
commit, the senders) is exercised by tests/daemon/test_alert_engine.py and test_engine_wakeups.py.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence

import pytest

from tests.alertkit import BASE, f, make_config
from watchdog.alerting.deliver.channels import build_channels
from watchdog.alerting.decide import lifecycle
from watchdog.alerting.decide.core import EngineCore, PassResult
from watchdog.alerting.decide.muting import ActiveSilences
from watchdog.alerting.decide.notification import AlertNote, Notification
from watchdog.alerting.deliver.store import Silence
from watchdog.alerting.timer import MAX_SLEEP, MIN_SLEEP, RETRY_SLEEP, SILENCE_POLL, Schedule
from watchdog.config.sections.alerting import parse_matcher
from watchdog.core.findings import HOLDER, Finding

URL = "http://127.0.0.1:9/hook"  # never contacted: the core only routes
T0 = 1_800_000_000.0


class Requester:
    """Stands in for the snapshot taker: records what it was asked for, names an archive."""

    def __init__(self) -> None:
        self.asked: List[str] = []

    def request(self, finding: Finding) -> Optional[str]:
        self.asked.append(finding.rule)
        return f"/snapshots/{finding.rule}.tar.gz"


class Core:
    """An EngineCore with the channels of its config, and one call per detector pass."""

    def __init__(self, tmp_path, **alerting) -> None:
        self.cfg = make_config(tmp_path, URL, **alerting).alerting
        self.core = EngineCore(self.cfg, {})
        self.channels = list(build_channels(self.cfg).values())
        self.silences = ActiveSilences()
        self.snapshots: Optional[Requester] = None

    def run(self, findings: Sequence[Finding], now: float, blind: frozenset = frozenset()) -> PassResult:
        self.core.see(findings, blind)
        tr = self.core.advance(now, observe=True)
        return self.core.settle(now, tr, self.silences, self.channels, self.snapshots)

    def hold(self, findings: Sequence[Finding], start: float, seconds: float, step: float = 0.25) -> List[Notification]:
        """Passes every `step` from `start` for `seconds`; every notification they made."""
        notes: List[Notification] = []
        for i in range(int(seconds / step) + 1):
            notes += self.run(findings, start + i * step).notifications
        return notes


def kinds(notes: Sequence[Notification]) -> List[tuple]:
    return [(n.kind, sorted(a.rule for a in n.alerts)) for n in notes]


def test_a_held_finding_pages_once_after_its_for_and_the_group_window(tmp_path):
    c = Core(tmp_path, group_window="1s", **{"for": {"stall": "2s"}})
    stall = f("stall", "critical")
    first = c.run([stall], T0)
    assert first.notifications == () and [a.state for a in first.changed] == ["pending"]
    assert first.due_at == T0 + 2.0  # the `for` ends: the timer wakes then, not before
    assert c.run([stall], T0 + 2.0).notifications == ()  # fired, its group window opens
    sent = c.hold([stall], T0 + 2.25, 2.0)
    [note] = sent
    assert note.kind == "firing" and note.status == "firing" and note.created == T0 + 3.0
    assert [a.rule for a in note.alerts] == ["stall"] and dict(note.group) == BASE
    assert [a.state for a in c.core.alerts.values()] == ["firing"]


def test_notifications_and_their_alerts_are_frozen_records(tmp_path):
    c = Core(tmp_path, group_window="0s")
    [note] = c.hold([f("log_oom", "critical", log_rule="npu_oom")], T0, 0.5)
    assert isinstance(note, Notification) and all(isinstance(a, AlertNote) for a in note.alerts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        note.kind = "resolved"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        note.alerts[0].severity = "info"  # type: ignore[misc]
    body = note.body()
    assert list(body) == ["kind", "status", "ikey", "created", "group", "alerts"]
    assert list(body["alerts"][0]) == ["fp", "rule", "severity", "status", "summary", "labels", "hint", "value",
                                       "since", "starts_at", "ends_at", "evidence", "snapshot", "dashboard",
                                       "count", "ranks", "said"]
    assert body["alerts"][0]["evidence"] == ["line one", "line two"] and body["alerts"][0]["ends_at"] is None


def test_findings_of_one_event_share_a_message_and_the_watchdogs_own_trouble_does_not(tmp_path):
    c = Core(tmp_path, group_window="1s", **{"for": {"probe_down": "0s"}})
    idle = [f("npu_idle", npu=str(i)) for i in range(8)]
    notes = c.hold(idle[:3], T0, 0.5)
    notes += c.hold(idle + [f("probe_down", probe="npu")], T0 + 0.75, 2.0)
    assert sorted(kinds(notes)) == [("firing", ["npu_idle"] * 8), ("firing", ["probe_down"])]
    [idle_note] = [n for n in notes if n.alerts[0].rule == "npu_idle"]
    assert sorted(a.labels["npu"] for a in idle_note.alerts) == [str(i) for i in range(8)]


def test_a_root_cause_mutes_its_symptom_which_is_released_when_the_cause_clears(tmp_path):
    c = Core(tmp_path, group_window="1s", resolve_delay="1s")
    c.snapshots = Requester()
    root, symptom = f("log_oom", "critical", log_rule="npu_oom"), f("stall", "critical")
    notes = c.hold([root, symptom], T0, 2.0)
    assert kinds(notes) == [("firing", ["log_oom"])]
    assert {a.rule: a.muted for a in c.core.alerts.values()} == {"log_oom": None, "stall": "inhibited:log_oom"}
    assert c.snapshots.asked == ["log_oom"], "a muted symptom runs no capture"
    assert notes[0].alerts[0].snapshot == "/snapshots/log_oom.tar.gz"
    notes = c.hold([symptom], T0 + 2.25, 3.0)
    # The root resolves; the stall, still there, is released at once (no second group window).
    assert sorted(kinds(notes)) == [("firing", ["stall"]), ("resolved", ["log_oom"])]
    assert c.snapshots.asked == ["log_oom", "stall"]


def test_a_symptom_outliving_its_cause_pages_only_after_the_release_hold(tmp_path):
    """The round that saw the cause clear may not have seen the symptom clear yet (a heartbeat
    file read before the job resumed): a released symptom waits for the hold, pages if it is
    still there then, and goes without a page if it clears within it. A silence's end releases
    at once."""
    c = Core(tmp_path, group_window="1s", resolve_delay="1s")
    c.core.release_hold = lambda a: 5.0
    root = f("stall", "critical")
    stale = [f("heartbeat_stale", "critical", rank=str(r)) for r in range(2)]
    assert kinds(c.hold([root, *stale], T0, 2.0)) == [("firing", ["stall"])]
    notes = c.hold(stale, T0 + 2.25, 2.0)  # the job resumed: the stall is gone, the heartbeats lag
    assert kinds(notes) == [("resolved", ["stall"])]
    later = c.hold(stale[:1], T0 + 4.5, 1.0)  # rank 1's heartbeat was read fresh: it just resolves
    assert later == []
    held = c.run(stale[:1], T0 + 5.75)
    (row,) = [a for a in c.core.alerts.values() if a.rule == "heartbeat_stale" and a.labels["rank"] == "0"]
    assert held.notifications == () and held.due_at == row.released_at + 5.0  # the timer wakes then, not before
    notes = c.hold(stale[:1], T0 + 6.0, 4.0)  # rank 0's stays stale past the hold: it outlives its cause
    assert kinds(notes) == [("firing", ["heartbeat_stale"])]
    assert [a.labels["rank"] for a in notes[0].alerts] == ["0"]


# -- the release hold around its neighbours: nothing else may wait with a held symptom ---------

def _released(c):
    """stall pages, then clears; heartbeat_stale (rank 0) stays and is released at T0+3.0 (held to T0+8.0)."""
    root, hb = f("stall", "critical"), f("heartbeat_stale", "critical", rank="0")
    assert kinds(c.hold([root, hb], T0, 2.0)) == [("firing", ["stall"])]
    assert kinds(c.hold([hb], T0 + 2.25, 1.5)) == [("resolved", ["stall"])]
    a = next(a for a in c.core.alerts.values() if a.rule == "heartbeat_stale")
    assert a.released_at is not None and not a.notified
    return hb


def test_a_new_root_cause_in_the_group_is_not_delayed_by_a_held_symptom(tmp_path):
    """A real crash of the recovered job during a symptom's hold pages within its group window."""
    c = Core(tmp_path, group_window="1s", resolve_delay="1s")
    c.core.release_hold = lambda a: 5.0
    hb = _released(c)
    crash = f("log_crash", "critical")  # the job crashes for real 0.5 s into the hold
    sent = []
    for i in range(24):
        now = T0 + 4.0 + i * 0.25
        sent += [(now, k) for k in kinds(c.run([hb, crash], now).notifications)]
    first = next(t for t, k in sent if k == ("firing", ["log_crash"]))
    assert first <= T0 + 4.0 + 1.0, f"log_crash paged {first - T0 - 4.0:.2f}s after firing (group_window 1s)"


def test_a_paged_symptom_escalating_as_its_cause_clears_is_held_like_any_other(tmp_path):
    """A symptom paged once, muted again by its cause's return, escalating in the pass its cause
    clears: a new hold, not the old release time (the page must not go at once)."""
    c = Core(tmp_path, group_window="1s", resolve_delay="1s")
    c.core.release_hold = lambda a: 5.0
    root = f("stall", "critical")
    warn = f("heartbeat_stale", "warning", rank="0")
    crit = f("heartbeat_stale", "critical", rank="0")
    # 1st episode: stall pages, clears, the stale heartbeat outlives it and pages after the hold.
    c.hold([root, warn], T0, 2.0)
    assert kinds(c.hold([warn], T0 + 2.25, 7.0)) == [("resolved", ["stall"]), ("firing", ["heartbeat_stale"])]
    # 2nd episode: the stall again (the paged heartbeat is inhibited by it), then the job recovers.
    assert kinds(c.hold([root, warn], T0 + 9.5, 2.0)) == [("firing", ["stall"])]
    notes = c.hold([warn], T0 + 11.75, 0.5)              # stall last seen T0+11.5; resolves at T0+12.5
    notes += c.run([crit], T0 + 12.5).notifications      # same pass: stall resolves, heartbeat read older
    notes += c.hold([crit], T0 + 12.75, 2.0)             # still inside a 5 s hold
    assert ("firing", ["heartbeat_stale"]) not in kinds(notes), kinds(notes)


def test_a_silence_that_starts_during_the_hold_does_not_cut_it_short(tmp_path):
    """A short silence during the hold: its end must not release the symptom before the hold ends."""
    c = Core(tmp_path, group_window="1s", resolve_delay="1s")
    c.core.release_hold = lambda a: 5.0
    hb = _released(c)
    s = Silence("s1", ["rule=heartbeat_stale"], T0 + 4.0, T0 + 5.0, "tester", "x")
    sent = []
    for i in range(20):
        now = T0 + 3.75 + i * 0.25
        c.silences = ActiveSilences(((s, tuple(parse_matcher(m) for m in s.matchers)),), s.ends_at) \
            if s.active(now) else ActiveSilences()
        sent += [(now, k) for k in kinds(c.run([hb], now).notifications)]
    assert all(t >= T0 + 8.0 for t, _ in sent), sent


def test_a_silence_mutes_until_it_ends_and_its_end_is_a_deadline(tmp_path):
    c = Core(tmp_path, group_window="0s")
    s = Silence("s1", ["rule=stall"], T0, T0 + 10.0, "tester", "maintenance")
    c.silences = ActiveSilences(((s, (parse_matcher("rule=stall"),)),), next_change=s.ends_at)
    stall = f("stall", "critical")
    result = c.run([stall], T0)
    assert result.notifications == () and [a.muted for a in result.changed] == ["silenced:s1"]
    assert result.due_at == T0 + 10.0
    c.silences = ActiveSilences()  # the silence has ended: the shell hands the core the new set
    assert kinds(c.run([stall], T0 + 10.0).notifications) == [("firing", ["stall"])]


def test_an_incident_resolves_once_after_the_resolve_delay_and_its_rows_go(tmp_path):
    c = Core(tmp_path, group_window="0s", resolve_delay="5s")
    x = f("job_gone", "critical")
    c.hold([x], T0, 0.5)
    assert c.hold([], T0 + 1.0, 4.25) == []  # last seen at T0 + 0.5: absent for 4.75 s at most
    result = c.run([], T0 + 5.5)
    assert kinds(result.notifications) == [("resolved", ["job_gone"])]
    [note] = result.notifications
    assert note.status == "resolved" and note.alerts[0].ends_at == T0 + 0.5
    assert result.deleted == (x.key,) and c.core.alerts == {}


def test_a_blind_probes_alert_stays_firing_and_its_absence_counts_from_when_it_sees_again(tmp_path):
    c = Core(tmp_path, group_window="0s", resolve_delay="5s")
    card, other = f("npu_missing", "critical", npu="2"), f("command_check", "critical", check="fs")
    assert kinds(c.run([card, other], T0).notifications) == [("firing", ["command_check", "npu_missing"])]
    blind = frozenset({"npu_missing"})
    notes = []
    for i in range(1, 41):  # 20 s of npu-smi not answering: four resolve delays
        notes += c.run([], T0 + i * 0.5, blind).notifications
    # The check that still sees resolved (its incident waits for the card); the card stays firing.
    assert notes == [] and c.core.alerts[other.key].state == "resolved"
    assert c.core.alerts[card.key].state == "firing"
    assert c.run([], T0 + 24.0).notifications == ()  # sees again: absent 3.5 s of the 5
    [note] = c.run([], T0 + 25.5).notifications
    assert note.status == "resolved" and sorted(a.rule for a in note.alerts) == ["command_check", "npu_missing"]


def test_a_card_fault_pages_once_while_its_holder_comes_and_goes(tmp_path):
    """The job label of a card's fault is context (Finding.context): the job restarting under it
    (a pass with no holder) changes neither its alert nor its page, and a row kept under the key
    over every label (a version before context) is adopted, not resolved and paged again."""
    c = Core(tmp_path, group_window="0s", resolve_delay="5s")
    old = f("npu_missing", "critical", npu="5", chip="0", training_job="llama")  # the old key
    assert kinds(c.run([old], T0).notifications) == [("firing", ["npu_missing"])]
    held = dataclasses.replace(old, context=HOLDER)
    free = dataclasses.replace(held, labels={k: v for k, v in held.labels.items() if k != "training_job"})
    adopted = c.run([held], T0 + 1.0)
    assert adopted.notifications == () and adopted.deleted == (old.key,) and list(c.core.alerts) == [held.key]
    notes = []
    for i in range(2, 40):  # 19 s: free for a pass in every three, held again
        notes += c.run([free if i % 3 == 0 else held], T0 + i * 0.5).notifications
    assert notes == [] and free.key == held.key and c.core.alerts[held.key].state == "firing"
    assert c.core.alerts[held.key].labels["training_job"] == "llama"  # the labels it paged with
    [note] = c.run([], T0 + 25.0).notifications
    assert note.status == "resolved" and [a.rule for a in note.alerts] == ["npu_missing"]


def test_an_end_a_paged_cause_explains_is_never_paged_alone(tmp_path):
    """A lost card pages; the job it killed ends (job_gone, muted by the card). The card comes
    back while the old job's end still holds: the end stays explained, no page; when it clears,
    no resolved message either. A warning cannot explain a critical end: that one pages once its
    cause clears."""
    c = Core(tmp_path, group_window="0s", resolve_delay="5s")
    card, end = f("npu_missing", "critical", npu="5", chip="0"), f("job_gone", "critical")
    assert kinds(c.run([card], T0).notifications) == [("firing", ["npu_missing"])]
    assert c.run([card, end], T0 + 1.0).notifications == ()
    assert c.core.alerts[end.key].muted == "explained:npu_missing"
    notes = c.hold([end], T0 + 2.0, 30.0)  # the card back for 30 s, the old job's end still there
    assert kinds(notes) == [("resolved", ["npu_missing"])] and c.core.alerts[end.key].state == "firing"
    assert c.hold([], T0 + 32.5, 10.0) == [] and c.core.alerts == {}
    sick, end = f("npu_unhealthy", "warning", npu="5", chip="0"), f("job_gone", "critical", training_job="other")
    sick = dataclasses.replace(sick, labels={**sick.labels, "training_job": "other"})
    assert kinds(c.run([sick], T0 + 100).notifications) == [("firing", ["npu_unhealthy"])]
    assert c.run([sick, end], T0 + 101).notifications == ()
    assert c.core.alerts[end.key].muted == "inhibited:npu_unhealthy"
    notes = c.hold([end], T0 + 102, 10.0)
    assert sorted(kinds(notes)) == [("firing", ["job_gone"]), ("resolved", ["npu_unhealthy"])]


def held_by(finding: Finding, job: Optional[str]) -> Finding:
    """`finding` with its holder (a context label) set to `job`, or none."""
    labels = {k: v for k, v in finding.labels.items() if k != "training_job"}
    return dataclasses.replace(finding, labels={**labels, **({"training_job": job} if job else {})}, context=HOLDER)


def test_a_card_under_a_new_holder_mutes_that_jobs_symptoms_and_its_silences_are_the_new_jobs(tmp_path):
    """The card paged under job-a; job-b took the chip while it stayed broken. The card still
    explains job-b's symptoms (its present labels count for inhibition, beside those it paged
    with), and a silence of retired job-a no longer mutes it: silences see the present."""
    c = Core(tmp_path, group_window="0s", resolve_delay="5s")
    card = f("npu_missing", "critical", npu="2", chip="0")
    assert kinds(c.run([held_by(card, "job-a")], T0).notifications) == [("firing", ["npu_missing"])]
    stall, gone = f("stall", "critical", training_job="job-b"), f("rank_missing", "critical", training_job="job-b", rank="2")
    assert c.hold([held_by(card, "job-b"), stall, gone], T0 + 1, 5.0) == []
    assert c.core.alerts[gone.key].muted == "explained:npu_missing" and c.core.alerts[stall.key].muted
    retired = ["training_job=job-a"]
    c.silences = ActiveSilences(((Silence("s1", retired, T0, T0 + 1000, "me", "job-a retired"),
                                  tuple(parse_matcher(m) for m in retired)),))
    c.hold([held_by(card, "job-b")], T0 + 7, 1.0)
    assert c.core.alerts[held_by(card, "job-b").key].muted is None


def test_an_explained_end_pages_when_it_escalates_past_its_cause_and_its_same_event_peer_stays_explained(tmp_path):
    c = Core(tmp_path, group_window="0s", resolve_delay="5s")
    sick = held_by(f("npu_unhealthy", "warning", npu="5", chip="0"), BASE["training_job"])
    end_w, end_c = f("job_gone", "warning"), f("job_gone", "critical")
    c.run([sick], T0)
    c.run([sick, end_w], T0 + 1)
    assert c.core.alerts[end_w.key].muted == "explained:npu_unhealthy"
    notes = c.hold([sick, end_c], T0 + 2, 5.0) + c.hold([end_c], T0 + 8, 20.0)  # critical now; cause clears
    assert ("firing", ["job_gone"]) in kinds(notes)
    c = Core(tmp_path, group_window="0s", resolve_delay="5s")
    card, end, oom = held_by(f("npu_missing", "critical", npu="5", chip="0"), BASE["training_job"]), \
        f("job_gone", "critical"), f("kernel_oom", "critical", rank="3")
    notes = c.hold([card], T0, 1.0) + c.hold([card, end], T0 + 2, 2.0) + c.hold([card, end, oom], T0 + 5, 2.0)
    assert c.core.alerts[oom.key].muted == "explained:npu_missing"  # the same end, seen by the kernel
    notes += c.hold([end, oom], T0 + 8, 20.0) + c.hold([oom], T0 + 29, 10.0)
    assert kinds(notes) == [("firing", ["npu_missing"]), ("resolved", ["npu_missing"])]


def test_an_upgrade_adopts_the_old_row_even_when_the_holder_changed_meanwhile(tmp_path):
    c = Core(tmp_path, group_window="0s", resolve_delay="5s")
    old = f("npu_missing", "critical", npu="5", chip="0", training_job="llama")  # the old full-label key
    notes = c.hold([old], T0, 1.0)
    lifecycle.restore(c.core.alerts, T0 + 2, lambda a: 5.0)  # the upgrade's restart
    c.core.first_round(T0 + 2)
    notes += c.hold([held_by(old, None)], T0 + 2, 2.0) + c.hold([held_by(old, "llama-r2")], T0 + 4.25, 20.0)
    assert kinds(notes) == [("firing", ["npu_missing"])] and list(c.core.alerts) == [held_by(old, None).key]


def test_routing_gives_each_channel_its_share_and_no_resolved_to_a_channel_that_declines(tmp_path):
    channels = [{"type": "webhook", "name": "all", "url": URL, "min_severity": "info"},
                {"type": "webhook", "name": "crit", "url": URL, "min_severity": "critical", "send_resolved": False},
                {"type": "webhook", "name": "npu3", "url": URL, "min_severity": "info", "matchers": ["npu=3"]}]
    c = Core(tmp_path, group_window="0s", resolve_delay="1s", channels=channels)
    found = [f("npu_idle", "warning", npu="3"), f("command_check", "critical", check="fs")]
    fired = c.run(found, T0)
    by_channel: Dict[str, List[str]] = {i.channel: sorted(a.rule for a in i.note.alerts) for i in fired.items}
    assert by_channel == {"all": ["command_check", "npu_idle"], "crit": ["command_check"], "npu3": ["npu_idle"]}
    assert {i.ikey for i in fired.items} == {fired.notifications[0].ikey}
    resolved = c.hold([], T0 + 0.25, 1.5)
    assert kinds(resolved) == [("resolved", ["command_check", "npu_idle"])]


def test_alertmanager_hears_firing_alerts_again_every_resend_interval(tmp_path):
    channels = [{"type": "alertmanager", "name": "am", "url": URL, "resend_interval": "10s"},
                {"type": "webhook", "name": "hook", "url": URL}]
    c = Core(tmp_path, group_window="0s", channels=channels)
    x = f("job_gone", "critical")
    assert kinds(c.run([x], T0).notifications) == [("firing", ["job_gone"])]
    result = c.run([x], T0 + 5.0)
    assert result.notifications == () and result.due_at == T0 + 10.0
    result = c.run([x], T0 + 10.0)
    [note] = result.notifications
    assert note.kind == "refresh" and note.only == "am"
    assert [i.channel for i in result.items] == ["am"]


def test_a_rolled_back_pass_leaves_nothing_but_the_first_sighting(tmp_path):
    c = Core(tmp_path, group_window="0s", **{"for": {"job_gone": "2s"}})
    x = f("job_gone", "critical")
    saved = c.core.savepoint()
    c.run([x], T0)  # its commit "failed":
    c.core.rollback(saved)
    assert c.core.alerts == {} and c.core.carry == {x.key: (T0, None)}
    assert c.run([x], T0 + 1.0).notifications == ()
    [a] = c.core.alerts.values()
    assert a.pending_since == T0, "its `for` counts from the first sighting"
    assert kinds(c.run([x], T0 + 2.0).notifications) == [("firing", ["job_gone"])]


def test_the_timer_sleeps_until_the_next_due_time_and_never_spins():
    s = Schedule(due_at=T0 + 5.0, passed_at=T0, polled_at=T0)
    assert not s.pass_due(T0 + 1.0) and s.next_wait(T0 + 1.0, ran=False) == 4.0
    assert s.pass_due(T0 + 5.0)
    s.due_at = float("inf")  # nothing due: a pass every MAX_SLEEP all the same
    assert s.next_wait(T0, ran=False) == MAX_SLEEP and s.pass_due(T0 + MAX_SLEEP)
    assert s.pass_due(T0 - 60.0), "a clock set back counts as MAX_SLEEP passed"
    s.watch_silences = True  # an alert fires: the silences are polled every SILENCE_POLL
    assert s.next_wait(T0 + 0.25, ran=False) == SILENCE_POLL - 0.25 and s.poll_due(T0 + SILENCE_POLL)
    s.due_at = T0  # a pass left something already due: the old poll's cadence, not a spin
    assert s.next_wait(T0 + 0.5, ran=True) == RETRY_SLEEP
    assert s.next_wait(T0 + 0.5, ran=False) == MIN_SLEEP and s.sleeping_until == T0 + 0.5 + MIN_SLEEP


def test_a_zombie_rank_reaped_is_one_page_not_two(tmp_path):
    """A rank exited and its launcher did not reap it (stopped, or busy): rank_zombie paged. When
    the launcher reaps it, the same death shows as rank_missing: folded into the zombie's page,
    not a second critical page 30 s later (an attack pass saw both). With the shipped config's
    resolve_delay (1m): the zombie's alert is still firing when the reaped rank shows as missing."""
    c = Core(tmp_path, group_window="1s", resolve_delay="1m")
    zombie = f("rank_zombie", "critical", rank="3", pid="13158")
    gone = f("rank_missing", "critical", rank="3", pid="13158")
    assert kinds(c.hold([zombie], T0, 40.0)) == [("firing", ["rank_zombie"])]
    # Nothing more: no second page, and no "resolved" for the zombie while its rank is missing.
    assert kinds(c.hold([gone], T0 + 41, 400.0, step=1.0)) == []

"""A notification is a typed record from routing to the channel's payload builder; it becomes
JSON in one place (`Notification.body`) and comes back in one (`from_json`), which reads what this
version writes, what an older daemon queued, and junk, without raising."""

from __future__ import annotations

import json

from watchdog.alerting.decide.notification import AlertNote, FleetCounts, Notification, from_json, to_json
from watchdog.alerting.words.render import Message

ALERT = {"fp": "f1", "rule": "stall", "severity": "critical", "status": "firing", "summary": "no progress",
         "labels": {"host": "n1", "training_job": "llama", "rank": "3"}, "hint": "py-spy dump", "value": "5m",
         "since": 100.0, "starts_at": 160.0, "ends_at": None, "evidence": ["line 1", "line 2"],
         "snapshot": "/var/lib/s.tgz", "dashboard": "https://g/d?job=llama", "count": 2, "ranks": [0, 1],
         "said": {"zh": "。"}}
BODY = {"kind": "firing", "status": "firing", "ikey": "abc", "created": 170.0,
        "group": {"host": "n1", "training_job": "llama"}, "alerts": [ALERT]}


def test_a_body_goes_round_the_record_unchanged():
    note = from_json(json.loads(json.dumps(BODY)))
    assert isinstance(note, Notification) and isinstance(note.alerts[0], AlertNote)
    a = note.alerts[0]
    assert (a.rule, a.severity, a.evidence, a.count, a.ranks, a.since) == ("stall", "critical", ("line 1", "line 2"),
                                                                           2, (0, 1), 100.0)
    assert to_json(note) == BODY
    assert list(to_json(note)) == list(BODY) and list(to_json(note)["alerts"][0]) == list(ALERT)


def test_repeat_and_the_fleet_counts_come_back_and_are_written_only_when_set():
    incident = {"nodes": 3, "ranks": 24, "symptoms": 5, "culprit_root": True, "symptom_rules": {"stall": 2}}
    note = from_json(dict(BODY, repeat=True, incident=incident))
    assert note.repeat and note.incident == FleetCounts(3, 24, 5, True, {"stall": 2}, incident)
    assert to_json(note) == dict(BODY, repeat=True, incident=incident)
    assert "repeat" not in to_json(from_json(BODY)) and "incident" not in to_json(from_json(BODY))


def test_a_row_of_an_older_daemon_or_junk_reads_with_defaults():
    old = {"kind": "firing", "status": "firing", "ikey": "k", "created": 1.0, "group": {"host": "n1", "job": "j"},
           "alerts": [{"rule": "stall", "severity": "warning", "summary": "s", "labels": {"job": "j"}}]}
    note = from_json(old)
    assert Message(note).job == "j" and note.alerts[0].evidence == () and note.alerts[0].count is None
    junk = from_json({"alerts": [None, {"labels": "x", "evidence": 5, "since": "yesterday", "count": -1,
                                        "ranks": "0-7", "said": ["zh"]}], "created": "now", "incident": [1]})
    assert (junk.kind, junk.status, junk.created, junk.incident) == ("firing", "firing", 0.0, None)
    a = junk.alerts[1]
    assert (a.labels, a.evidence, a.since, a.count, a.ranks, a.said) == ({}, (), None, None, None, {})
    assert from_json([]).alerts == () and from_json("text").ikey == ""


def test_routing_hands_each_channel_a_record():
    note = from_json(BODY)
    share = note.share([])
    assert isinstance(share, Notification) and share.alerts == () and share.ikey == note.ikey
    assert from_json(note) is note

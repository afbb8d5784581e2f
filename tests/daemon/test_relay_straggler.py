"""The relay folds the fleet straggler alert into the job's incident and names its node first:
the shipped Alertmanager route groups every alert of a training job, and `job_straggler_node`
carries `role: root` (contrib/prometheus/npu-watchdog.rules.yml), while the nodes' own
`job_slowdown` warnings, which every node of a synchronous job raises alike, are symptoms."""

from __future__ import annotations

import time
from typing import Any, Dict, List

import yaml

from tests.helpers import REPO
from watchdog.alerting.words.render import Message
from watchdog.relay.incident import message_body, parse_payload

JOB = "llm"
T0 = 1_700_000_000.0


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + ".000000000Z"


def node_alert(host: str, seen: float) -> Dict[str, Any]:
    """A node daemon's pushed job_slowdown (fleet mode: first_seen annotation, role symptom)."""
    return {"status": "firing",
            "labels": {"alertname": "job_slowdown", "severity": "warning", "role": "symptom", "host": host,
                       "training_job": JOB},
            "annotations": {"summary": f"job {JOB} steps 20% slower than its baseline", "first_seen": iso(seen)},
            "startsAt": iso(seen + 20), "endsAt": "0001-01-01T00:00:00Z"}


def straggler_alert(host: str, starts: float) -> Dict[str, Any]:
    """Prometheus's alert as the shipped rule labels it (no first_seen: its startsAt)."""
    rule = next(r for g in yaml.safe_load((REPO / "contrib/prometheus/npu-watchdog.rules.yml").read_text())["groups"]
                for r in g["rules"] if r.get("alert") == "job_straggler_node")
    return {"status": "firing",
            "labels": {"alertname": "job_straggler_node", **rule["labels"], "training_job": JOB, "host": host,
                       "instance": f"{host}:9841"},
            "annotations": {"summary": f"Job {JOB} is slowed by {host}"},
            "startsAt": iso(starts), "endsAt": "0001-01-01T00:00:00Z"}


def test_the_straggler_node_is_the_incidents_culprit():
    alerts: List[Dict[str, Any]] = [node_alert(f"s{i:02d}", T0 + i) for i in range(16)]
    alerts.append(straggler_alert("s07", T0 + 150))
    doc = {"version": "4", "groupKey": '{}:{training_job="%s"}' % JOB, "status": "firing", "receiver": "relay",
           "groupLabels": {"training_job": JOB}, "commonLabels": {}, "commonAnnotations": {}, "alerts": alerts}
    inc = parse_payload(doc)
    body = message_body(inc, "firing", T0 + 200, T0 + 200)
    assert [a["rule"] for a in body["alerts"]] == ["job_straggler_node"]
    assert body["group"]["host"] == "s07"
    assert body["incident"]["symptom_rules"] == {"job_slowdown": 16}
    title = Message(body).title()
    assert "job_straggler_node on s07" in title and "16 nodes" in title, title


def test_a_nodes_job_slowdown_is_pushed_as_a_symptom():
    """In fleet mode the node labels its job_slowdown `role=symptom` (a stall inhibits it), so
    the straggler alert is the incident's only root."""
    from watchdog.config.schema import Config

    assert Config().alerting.role("job_slowdown") == "symptom"

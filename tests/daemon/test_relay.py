"""`npu-watchdog relay`: the pure incident view (ordering, counts, what pages), and the real relay
process between an Alertmanager-shaped sender and a signed Feishu look-alike."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

from tests.fakes.receivers import Answer, Receiver
from tests.helpers import REPO, free_port, http_get, wait_for
from watchdog.alerting.render import Message, escape_plain
from watchdog.relay.incident import PayloadError, message_body, parse_payload, parse_time
from watchdog.relay.server import decide

JOB = "llm"
T0 = 1_780_000_000.0


def iso(ts: float) -> str:
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(round((ts % 1) * 1e9)):09d}Z"


def alert(rule: str, host: str, seen: float, role: str = "symptom", status: str = "firing", **labels: str) -> Dict[str, Any]:
    return {"status": status,
            "labels": {"alertname": rule, "severity": "critical", "role": role, "host": host, "training_job": JOB, **labels},
            "annotations": {"summary": f"{rule} on {host}", "first_seen": iso(seen), "fired_at": iso(seen + 20),
                            "log_lines": f"line of {rule}"},
            # Alertmanager's own startsAt can be later than when the node first saw it.
            "startsAt": iso(seen + 30), "endsAt": "0001-01-01T00:00:00Z"}


def payload(alerts: List[Dict[str, Any]], status: str = "firing", key: str = JOB) -> Dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{training_job="%s"}' % key, "status": status, "receiver": "relay",
            "groupLabels": {"training_job": key}, "commonLabels": {}, "commonAnnotations": {}, "alerts": alerts}


def oom_incident(status: str = "firing") -> Dict[str, Any]:
    alerts = [alert("log_hccl", f"node-{i:02d}", T0 + 1800 + i, rank="0") for i in range(1, 17) if i != 7]
    alerts.insert(5, alert("log_oom", "node-07", T0 + 5, role="root", rank="3", npu="3", status=status))
    alerts.append(alert("log_hccl", "node-07", T0 + 1, rank="1"))  # a symptom seen before the root
    return payload(alerts, status)


# -- pure --------------------------------------------------------------------------------------------


def test_culprit_is_the_earliest_root_and_symptoms_are_counted():
    inc = parse_payload(oom_incident())
    body = message_body(inc, "firing", T0 + 2000, T0 + 2000)
    title = Message(body).title(escape_plain)
    assert title.startswith("[CRITICAL] llm: first failure log_oom on node-07 npu=3 rank=3 | ")
    assert title.endswith("16 nodes, 17 ranks affected, 16 symptom alerts")
    assert [a["rule"] for a in body["alerts"]] == ["log_oom"]  # the symptoms are not listed
    assert body["alerts"][0]["since"] == T0 + 5  # first_seen, not Alertmanager's startsAt
    assert body["alerts"][0]["evidence"] == ["line of log_oom"]


def test_without_a_root_the_earliest_symptom_is_named():
    inc = parse_payload(payload([alert("stall", "node-02", T0 + 9), alert("stall", "node-11", T0 + 3)]))
    title = Message(message_body(inc, "firing", T0, T0)).title()
    assert "llm: no root cause reported; earliest stall on node-11 | 2 nodes, 0 ranks" in title


def test_hostile_label_values_are_escaped_in_the_card_title():
    inc = parse_payload(payload([alert("log_oom", "<at id=all></at>", T0, role="root")]))
    title = Message(message_body(inc, "firing", T0, T0)).title(escape_plain)
    assert "<at" not in title and "＜at id=all＞" in title


@pytest.mark.parametrize("doc,error", [
    ([], "expected a JSON object"),
    ({"version": "3", "alerts": [{}], "groupKey": "k"}, "unsupported payload version"),
    ({"version": "4", "alerts": [], "groupKey": "k"}, "alerts must be a non-empty list"),
    ({"version": "4", "alerts": [{}]}, "groupKey is missing"),
    ({"version": "4", "alerts": ["x"], "groupKey": "k"}, r"alerts\[0\] must be an object"),
    ({"version": "4", "alerts": [{"labels": ["a"]}], "groupKey": "k"}, r"alerts\[0\].labels must be an object"),
])
def test_bad_payloads_are_named(doc, error):
    with pytest.raises(PayloadError, match=error):
        parse_payload(doc)


def test_times_with_nanoseconds_and_the_zero_time():
    assert parse_time("2026-01-01T00:00:05.123456789Z") == pytest.approx(1767225605.123456)
    assert parse_time("2026-01-01T00:00:05Z") == 1767225605.0
    assert parse_time("0001-01-01T00:00:00Z") is None and parse_time("yesterday") is None and parse_time(5) is None


def test_what_pages():
    grace = 600.0
    hang = parse_payload(payload([alert("stall", "node-01", T0)]))
    kind, st = decide(hang, None, T0 + 10, grace)
    assert kind == "firing" and st == {"started": T0 + 10, "root": False}
    assert decide(hang, st, T0 + 20, grace) == ("", st)  # the other peer, or a later group update
    with_root = parse_payload(payload([alert("stall", "node-01", T0), alert("log_oom", "node-02", T0 + 1, role="root")]))
    kind, st = decide(with_root, st, T0 + 30, grace)
    assert kind == "firing" and st["root"]  # the culprit turned up: one more page naming it
    assert decide(with_root, st, T0 + 40, grace)[0] == ""
    done = parse_payload(payload([dict(alert("stall", "node-01", T0), status="resolved")], "resolved"))
    kind, st = decide(done, st, T0 + 50, grace)
    assert kind == "resolved" and st["resolved_at"] == T0 + 50
    assert decide(done, st, T0 + 55, grace)[0] == ""  # the other peer's resolve
    # The other peer's older view still shows the same alerts firing: not a new incident ...
    assert decide(with_root, st, T0 + 56, grace)[0] == ""
    # ... but an alert that fired after the resolve is (even if its node dates the condition
    # earlier, e.g. a log rule whose matches span both incidents), and so is anything after the grace.
    again = parse_payload(payload([alert("stall", "node-01", T0 + 40)]))
    assert again.alerts[0].first_seen < st["resolved_at"] < again.alerts[0].fired_at
    assert decide(again, st, T0 + 61, grace)[0] == "firing"
    assert decide(with_root, st, T0 + 50 + grace + 1, grace)[0] == "firing"
    assert decide(done, None, T0, grace) == ("", None)  # a resolve of nothing paged


# -- the relay process -------------------------------------------------------------------------------


class RelayProc:
    def __init__(self, tmp: Path, channel_url: str, secret: str, **extra: Any):
        self.port = free_port()
        self.config = tmp / "relay.yaml"
        cfg = {"listen": f"127.0.0.1:{self.port}", "state_dir": str(tmp / "state"),
               "alerting": {"retry_initial": "300ms", "retry_max": "1s", "channels": [
                   {"type": "feishu", "name": "oncall", "url": channel_url, "secret": secret, "min_severity": "info"}]}}
        cfg.update(extra)
        self.config.write_text(yaml.safe_dump(cfg))
        self.log_path = tmp / "relay.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "watchdog", "relay", "-c", str(self.config)],
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO))
        self.url = f"http://127.0.0.1:{self.port}"
        wait_for(lambda: self.proc.poll() is None and http_get(self.url + "/healthz")[0] == 200, timeout=30,
                 what="relay up")

    def post(self, doc: Any, raw: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None) -> tuple:
        data = raw if raw is not None else json.dumps(doc).encode()
        req = urllib.request.Request(self.url + "/alertmanager", data=data, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def relay_factory(tmp_path):
    made: List[RelayProc] = []

    def make(*a: Any, **kw: Any) -> RelayProc:
        r = RelayProc(tmp_path, *a, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()


def titles(rx: Receiver) -> List[str]:
    return [r.json["card"]["header"]["title"]["content"] for r in rx.accepted()]


def test_relay_sends_one_signed_card_per_incident_and_survives_bad_input(relay_factory):
    secret = "relay-secret-123"
    with Receiver("feishu", secret=secret) as rx:
        relay = relay_factory(rx.url, secret)
        assert relay.post(None, raw=b"\xff{not json")[0] == 400
        code, answer = relay.post({"version": "4", "alerts": []})
        assert code == 400 and "alerts must be a non-empty list" in answer["error"]
        # Both HA peers deliver the group; the second copy and a later update are no page.
        for _ in range(3):
            assert relay.post(oom_incident())[0] == 200
        rx.wait_for(1)
        # Alertmanager's resolve lists what resolved last (the OOM resolved earlier): the message
        # still names the culprit that was paged.
        resolved = oom_incident("resolved")
        resolved["alerts"] = [dict(a, status="resolved") for a in resolved["alerts"] if a["labels"]["role"] != "root"]
        assert relay.post(resolved)[0] == 200
        assert relay.post(resolved)[0] == 200
        rx.wait_for(2)
        wait_for(lambda: json.loads(http_get(relay.url + "/healthz")[1])["outbox_pending"] == 0, what="outbox drained")
        assert json.loads(http_get(relay.url + "/healthz")[1])["open_incidents"] == 0
        t = titles(rx)
        assert len(t) == 2 and t[0].startswith("[CRITICAL] llm: first failure log_oom on node-07 ")
        assert t[1].startswith("[CRITICAL] RESOLVED llm: first failure log_oom on node-07 ")
        assert t[1].endswith("| 16 nodes, 17 ranks affected, 16 symptom alerts")
        assert relay.proc.poll() is None
    assert secret not in relay.log() and rx.path not in relay.log()


def test_relay_retries_a_failing_chat_and_keeps_the_page_across_a_restart(relay_factory):
    secret = "relay-secret-456"
    with Receiver("feishu", secret=secret) as rx:
        rx.script(Answer(status=502, body="bad gateway"), Answer(status=502, body="bad gateway"))
        relay = relay_factory(rx.url, secret)
        assert relay.post(oom_incident())[0] == 200
        rx.wait_for(1, timeout=30)
        assert len(rx.requests) == 3  # two failed attempts, then delivered
        assert relay.stop() == 0
        relay2 = relay_factory(rx.url, secret)
        assert relay2.post(oom_incident())[0] == 200  # remembered: already paged
        wait_for(lambda: "incident already paged" in relay2.log(), what="the repeat recognised")
        assert len(rx.accepted()) == 1


def test_relay_checks_the_bearer_token_and_refuses_loops(relay_factory, tmp_path):
    with Receiver("feishu", secret="s") as rx:
        relay = relay_factory(rx.url, "s", bearer_token="tok-789")
        assert relay.post(oom_incident())[0] == 401
        assert relay.post(oom_incident(), headers={"Authorization": "Bearer tok-789"})[0] == 200
        rx.wait_for(1)
    bad = tmp_path / "loop.yaml"
    bad.write_text(yaml.safe_dump({"alerting": {"channels": [
        {"type": "alertmanager", "name": "am", "url": "http://127.0.0.1:9093"}]}}))
    r = subprocess.run([sys.executable, "-m", "watchdog", "relay", "-c", str(bad), "--check"],
                       capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert r.returncode == 2 and "would loop back into Alertmanager" in r.stderr

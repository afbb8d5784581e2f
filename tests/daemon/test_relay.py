"""`npu-watchdog relay`: the pure incident view (ordering, counts, what pages), and the real relay
process between an Alertmanager-shaped sender and a signed Feishu look-alike."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

from tests.fakes.receivers import Answer, Receiver
from tests.helpers import REPO, free_port, http_get, wait_for
from watchdog.alerting.words.render import Message, escape_plain
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
    assert kind == "firing" and st["started"] == T0 + 10 and st["root"] is False
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


def test_a_hang_of_32_ranks_on_16_nodes_counts_32_ranks():
    """`stall` has no `rank` label: each node lists its ranks of the job in the `ranks` annotation."""
    stalls = [alert("stall", f"node-{i:02d}", T0 + i) for i in range(1, 17)]
    for i, a in enumerate(stalls):
        a["annotations"]["ranks"] = f"{2 * i},{2 * i + 1}"
    inc = parse_payload(payload(stalls))
    assert inc.counts()["ranks"] == 32 and inc.counts()["nodes"] == 16
    title = Message(message_body(inc, "firing", T0 + 100, T0 + 100)).title(escape_plain)
    assert "| 16 nodes, 32 ranks affected, " in title, title


def test_a_cascade_counts_each_rank_once():
    """An OOM of rank 3 on node 7 (rank label), job_gone on node 7 and stalls elsewhere (the
    ranks annotation): rank 3 is counted once, and a hostile annotation is not a rank."""
    alerts = [alert("log_oom", "node-07", T0, role="root", rank="3"),
              dict(alert("job_gone", "node-07", T0 + 5), annotations={"ranks": "0,1,2,3", "first_seen": iso(T0 + 5)}),
              dict(alert("stall", "node-08", T0 + 9), annotations={"ranks": "4, 5,,6,7", "first_seen": iso(T0 + 9)}),
              dict(alert("stall", "node-09", T0 + 9), annotations={"ranks": "", "first_seen": iso(T0 + 9)})]
    c = parse_payload(payload(alerts)).counts()
    assert (c["nodes"], c["ranks"]) == (3, 8)


def test_the_fast_root_group_and_the_job_group_are_one_incident():
    """The shipped route pages a log-visible root cause from its own group (short group_wait);
    the job's group reports the same job later: one page, and one resolve once both resolved."""
    grace = 600.0
    oom = alert("log_oom", "node-07", T0, role="root", rank="3")
    fast = parse_payload(dict(payload([oom]), groupKey='{}/{role="root"}:{training_job="llm"}'))
    slow = parse_payload(payload([oom, alert("log_hccl", "node-08", T0 + 30, rank="0")]))
    assert fast.scope == slow.scope and fast.group_key != slow.group_key
    kind, st = decide(fast, None, T0 + 10, grace)
    assert kind == "firing" and st["root"]
    kind, st = decide(slow, st, T0 + 40, grace)
    assert kind == ""  # the same incident, paged already with its root
    fast_done = parse_payload(dict(payload([dict(oom, status="resolved")], "resolved"),
                                   groupKey='{}/{role="root"}:{training_job="llm"}'))
    kind, st = decide(fast_done, st, T0 + 60, grace)
    assert kind == "" and "resolved_at" not in st  # the HCCL symptoms still fire
    slow_done = parse_payload(payload([dict(oom, status="resolved")], "resolved"))
    kind, st = decide(slow_done, st, T0 + 90, grace)
    assert kind == "resolved" and st["resolved_at"] == T0 + 90
    old = {"started": T0, "root": True}  # a record written before groups were kept
    assert decide(slow_done, old, T0 + 95, grace)[0] == "resolved"


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


# -- hostile bodies --------------------------------------------------------------------------------

def _nested_labels(depth: int) -> bytes:
    inner = b'{"a":' * depth + b'"x"' + b"}" * depth
    return (b'{"version": "4", "groupKey": "k", "status": "firing", "alerts": [{"labels": ' + inner
            + b', "annotations": {}, "startsAt": "2026-11-30T10:00:00Z"}]}')


def test_deeply_nested_bodies_are_a_400_never_a_500(relay_factory):
    """Fails on the code before the fix: both answered 500 with a traceback (RecursionError), which
    Alertmanager retries until the alert expires."""
    with Receiver("feishu") as rx:
        relay = relay_factory(rx.url, "s")
        for raw in (b"[" * 100_000 + b"]" * 100_000, _nested_labels(5_000), _nested_labels(40),
                    b'{"a": ' * 100_000):
            code, answer = relay.post(None, raw=raw)
            assert code == 400 and ("nested deeper" in answer["error"] or "not a JSON" in answer["error"]), answer
        code, answer = relay.post(None, raw=_nested_labels(2))
        assert code == 400 and "must be a string" in answer["error"]
        assert relay.post(oom_incident())[0] == 200  # and it still works
        assert "Traceback" not in relay.log()


def _vm_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


@pytest.mark.slow
def test_parallel_large_bodies_keep_the_relays_memory_bounded(relay_factory):
    """48 parallel POSTs of 15 MB (under max_body_bytes). Fails on the code before the fix: every
    body was read and parsed at once (peak RSS about 1 GB). The bound is derived from the limits:
    the relay's resident size before the posts plus 12 times `max_bodies_bytes` (a body held as
    bytes, as text and as parsed objects, with allocator slack), well under 48 bodies."""
    from watchdog.relay.config import RelayConfig

    held = RelayConfig.model_fields["max_bodies_bytes"].default
    now = time.time()
    alerts = [alert("log_oom", f"node-{i:05d}", now, role="root" if i == 0 else "symptom", rank=str(i % 8),
                    summary="x" * 400) for i in range(20_000)]
    body = json.dumps(payload(alerts)).encode()
    assert 14 << 20 < len(body) < RelayConfig.model_fields["max_body_bytes"].default
    with Receiver("feishu") as rx:
        relay = relay_factory(rx.url, "s")
        before = _vm_kib(relay.proc.pid, "VmRSS") * 1024
        answers: List[tuple] = []

        def post() -> None:
            req = urllib.request.Request(relay.url + "/alertmanager", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    answers.append((r.status, None))
            except urllib.error.HTTPError as e:
                answers.append((e.code, e.headers.get("Retry-After")))

        threads = [threading.Thread(target=post) for _ in range(48)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        peak = _vm_kib(relay.proc.pid, "VmHWM") * 1024
        codes = [a[0] for a in answers]
        assert len(answers) == 48 and codes.count(200) >= 1, answers
        assert all(a == (503, "5") or a[0] == 200 for a in answers), answers
        assert peak < before + 12 * held, f"peak RSS {peak >> 20} MiB (before {before >> 20} MiB)"
        # A body is released just after its answer is sent: the last one may still be held.
        health = wait_for(lambda: [h for h in [json.loads(http_get(relay.url + "/healthz")[1])]
                                   if h["bodies_held_bytes"] == 0], what="every body released")[0]
        assert health["bodies_refused_total"] == codes.count(503)
        print(f"answers 200: {codes.count(200)}, 503: {codes.count(503)}; peak RSS {peak >> 20} MiB, before {before >> 20} MiB")


def test_relay_card_of_a_hang_of_32_ranks_on_16_nodes_says_32_ranks(relay_factory):
    """The real relay process: 16 nodes' `stall` alerts (no `rank` label, each node's 2 ranks in
    the `ranks` annotation) page once, titled with 16 nodes and 32 ranks."""
    secret = "relay-secret-789"
    stalls = [alert("stall", f"node-{i:02d}", T0 + i) for i in range(16)]
    for i, a in enumerate(stalls):
        a["annotations"]["ranks"] = f"{2 * i},{2 * i + 1}"
    with Receiver("feishu", secret=secret) as rx:
        relay = relay_factory(rx.url, secret)
        assert relay.post(payload(stalls))[0] == 200
        rx.wait_for(1)
        (t,) = titles(rx)
        assert t.startswith("[CRITICAL] llm: no root cause reported; earliest stall on node-00")
        assert t.endswith("| 16 nodes, 32 ranks affected, 16 symptom alerts"), t

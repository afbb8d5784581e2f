"""`notifications_failing` on synthetic state: which drops count, for how long, how severe."""

from __future__ import annotations

from tests.synth import T0, Synth
from watchdog.core.delivery import EXPIRED, LOST, REJECTED, LostNotification
from watchdog.detectors import delivery


def _lost(channel: str, at: float, severity: str = "warning", rules=("stall",), outcome: str = REJECTED,
          status: str = "firing") -> LostNotification:
    return LostNotification(channel, outcome, status, severity, tuple(rules), "HTTP 404, permanent failure: gone", at)


def test_one_finding_per_channel_at_the_worst_severity_dropped():
    s = Synth(probes=())
    s.put(LOST, _lost("slack", T0 + 1), at=T0 + 1)
    s.put(LOST, _lost("slack", T0 + 2, severity="critical", rules=("job_gone",)), at=T0 + 2)
    s.put(LOST, _lost("feishu", T0 + 3, severity="info", outcome=EXPIRED), at=T0 + 3)
    found = {f.labels["channel"]: f for f in delivery.detect(s.view(T0 + 10), s.config)}
    assert sorted(found) == ["feishu", "slack"]
    assert found["slack"].severity == "critical" and found["feishu"].severity == "warning"
    assert found["slack"].since == T0 + 1 and found["slack"].details["last"] == T0 + 2
    assert "2 notification(s)" in found["slack"].summary and "2 rejected" in found["slack"].summary
    assert "1 given up on" in found["feishu"].summary
    # The facts reach a Chinese message too (appended to the rule's Chinese summary).
    assert found["slack"].details["said"]["zh"].startswith("：15 分钟内 2 条（2 条被拒绝）；最后的回答：HTTP 404")
    assert [e.split(" ", 1)[1] for e in found["slack"].evidence] == [
        "firing warning stall: rejected: HTTP 404, permanent failure: gone",
        "firing critical job_gone: rejected: HTTP 404, permanent failure: gone"]


def test_a_drop_counts_for_dropped_hold_then_the_finding_clears():
    s = Synth(probes=())
    hold = s.config.alerting.dropped_hold
    assert hold == 900.0
    s.put(LOST, _lost("slack", T0), at=T0)
    assert delivery.detect(s.view(T0 + hold - 1), s.config)
    assert delivery.detect(s.view(T0 + hold + 1), s.config) == []


def test_the_rules_own_message_dropped_does_not_keep_it_up():
    s = Synth(probes=())
    s.put(LOST, _lost("slack", T0, rules=("notifications_failing",)), at=T0)
    assert delivery.detect(s.view(T0 + 1), s.config) == []
    # ... but a message that carried it beside another alert counts (that alert was lost).
    s.put(LOST, _lost("slack", T0 + 1, rules=("notifications_failing", "stall")), at=T0 + 1)
    assert [f.labels["channel"] for f in delivery.detect(s.view(T0 + 2), s.config)] == ["slack"]


def test_a_restored_alert_waits_out_what_is_left_of_its_hold(monkeypatch):
    s = Synth(probes=())
    (rule,) = delivery.RULES
    monkeypatch.setattr(delivery.clock, "now", lambda: T0 + 100)
    assert rule.warmup(s.config, {"last": T0}) == s.config.alerting.dropped_hold - 100
    assert rule.warmup(s.config, {}) == 0.0

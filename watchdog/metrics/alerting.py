"""Metrics of the alert engine and its outbox; every series starts at zero."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

from watchdog.alerting.engine import KNOWN_RULES
from watchdog.findings import SEVERITIES
from watchdog.metrics.catalog import MetricDef, MetricSample

RESULTS = ("sent", "retried", "failed", "expired")
MUTE_REASONS = ("silenced", "inhibited")

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_alerts_firing", "gauge", ("rule", "severity"),
              "Alerts in the firing state (past their `for` duration), including muted ones."),
    MetricDef("npu_watchdog_alerts_pending", "gauge", (),
              "Findings waiting for their `for` duration before they fire."),
    MetricDef("npu_watchdog_alerts_muted", "gauge", ("reason",),
              "Firing alerts currently not sent because a silence or an inhibition rule mutes them."),
    MetricDef("npu_watchdog_notifications_total", "counter", ("channel", "result"),
              "Delivery attempts by channel and result: sent, retried (failed, will retry), failed "
              "(rejected, not retryable: fix the config), expired (gave up after max_age)."),
    MetricDef("npu_watchdog_outbox_pending", "gauge", (),
              "Notifications committed to the outbox and not yet delivered."),
    MetricDef("npu_watchdog_outbox_oldest_age_seconds", "gauge", (),
              "Age of the oldest undelivered notification (0 when the outbox is empty)."),
    MetricDef("npu_watchdog_silences_active", "gauge", (),
              "Silences in force now."),
    MetricDef("npu_watchdog_deadman_pings_total", "counter", ("result",),
              "Dead-man pings after complete probe rounds, by result (ok, failed)."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    engine = rt.engine
    firing: Dict[Tuple[str, str], int] = {}
    for rule in KNOWN_RULES:
        for sev in SEVERITIES:
            firing[(rule, sev)] = 0
    pending = 0
    muted = {r: 0 for r in MUTE_REASONS}
    states = engine.alert_states() if hasattr(engine, "alert_states") else []
    for a in states:
        if a.state == "firing":
            firing[(a.rule, a.severity)] = firing.get((a.rule, a.severity), 0) + 1
            if a.muted:
                reason = a.muted.split(":", 1)[0]
                muted[reason] = muted.get(reason, 0) + 1
        else:
            pending += 1
    for (rule, sev), n in sorted(firing.items()):
        yield MetricSample("npu_watchdog_alerts_firing", {"rule": rule, "severity": sev}, n)
    yield MetricSample("npu_watchdog_alerts_pending", {}, pending)
    for reason, n in muted.items():
        yield MetricSample("npu_watchdog_alerts_muted", {"reason": reason}, n)
    outbox = rt.services.get("outbox")
    counts = dict(outbox.counts) if outbox is not None else {}
    for (channel, result), n in sorted(counts.items()):
        yield MetricSample("npu_watchdog_notifications_total", {"channel": channel, "result": result}, n)
    pending_n, oldest = outbox.stats() if outbox is not None else (0, 0.0)
    yield MetricSample("npu_watchdog_outbox_pending", {}, pending_n)
    yield MetricSample("npu_watchdog_outbox_oldest_age_seconds", {}, oldest)
    yield MetricSample("npu_watchdog_silences_active", {},
                       engine.silences_active() if hasattr(engine, "silences_active") else 0)
    dm = getattr(engine, "deadman", None)
    for result in ("ok", "failed"):
        yield MetricSample("npu_watchdog_deadman_pings_total", {"result": result}, dm.counts[result] if dm else 0)

"""Metrics of the alert engine and its outbox; every series starts at zero."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Sequence, Tuple

from watchdog.core.findings import JOB_LABEL, SEVERITIES
from watchdog.core.verdict import DOMAINS
from watchdog.metrics.catalog import MetricDef, MetricSample
from watchdog.metrics.core import node_jobs
from watchdog.core.rulecatalog import names as rule_names

RESULTS = ("sent", "retried", "failed", "expired")
MUTE_REASONS = ("silenced", "inhibited", "explained")

#: Position of this module's rows in the metric table (and in /metrics).
ORDER = 70

METRICS: List[MetricDef] = [
    MetricDef("npu_watchdog_alerts_firing", "gauge", ("rule", "severity", JOB_LABEL),
              "Alerts in the firing state (past their `for` duration), including muted ones, by the job "
              "they belong to (0 for every rule of each job the node runs; empty for the node's own)."),
    MetricDef("npu_watchdog_alerts_pending", "gauge", (),
              "Findings waiting for their `for` duration before they fire."),
    MetricDef("npu_watchdog_alerts_muted", "gauge", ("reason",),
              "Firing alerts currently not sent because a silence or an inhibition rule mutes them, or "
              "because a cause that paged explains them for good (`explained`: a job's or rank's end)."),
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
    MetricDef("npu_watchdog_alert_first_seen_timestamp_seconds", "gauge", ("rule", "role", JOB_LABEL, "rank", "npu"),
              "Per firing alert: when this node first saw the condition (Unix time); role is root or "
              "symptom, training_job the alert's job (empty for the node's own). The fleet rules take the "
              "earliest root per training job: the first failure."),
    MetricDef("npu_watchdog_state_writable", "gauge", (),
              "1 while the alert engine's commits to the state folder succeed, 0 while they fail (read-only, "
              "full, deleted and not re-creatable): new alerts are held until it can be written (state_unwritable)."),
    MetricDef("npu_watchdog_interruptions_total", "counter", ("domain", "cause"),
              "Interruptions paged (log, kernel and departure alerts that fired, each firing episode once, counted "
              "by the alert engine and kept with its state across daemon restarts), by the verdict's domain "
              "(hardware, network, memory, numerics, user_code, unknown) and the cause that decided it (a log or "
              "kernel rule, a clean-end row): the share of `unknown` is what no rule explains."),
    MetricDef("npu_watchdog_state_write_errors_total", "counter", (),
              "Commits of the alert state (with the notifications they queue) that failed; each is retried."),
]


def samples(rt: Any) -> Iterator[MetricSample]:
    engine = rt.engine
    firing: Dict[Tuple[str, str, str], int] = {}
    for job in node_jobs(rt) or [""]:
        for rule in rule_names():
            for sev in SEVERITIES:
                firing[(rule, sev, job)] = 0
    pending = 0
    muted = {r: 0 for r in MUTE_REASONS}
    states = engine.alert_states() if engine is not None else []
    for a in states:
        if a.state == "firing":
            key = (a.rule, a.severity, a.now_labels.get(JOB_LABEL, ""))
            firing[key] = firing.get(key, 0) + 1
            if a.muted:
                reason = a.muted.split(":", 1)[0]
                muted[reason] = muted.get(reason, 0) + 1
        elif a.state == "pending":
            pending += 1
    for (rule, sev, job), n in sorted(firing.items()):
        yield MetricSample("npu_watchdog_alerts_firing", {"rule": rule, "severity": sev, JOB_LABEL: job}, n)
    yield MetricSample("npu_watchdog_alerts_pending", {}, pending)
    for reason, n in muted.items():
        yield MetricSample("npu_watchdog_alerts_muted", {"reason": reason}, n)
    outbox = rt.outbox
    counts = dict(outbox.counts) if outbox is not None else {}
    for (channel, result), n in sorted(counts.items()):
        yield MetricSample("npu_watchdog_notifications_total", {"channel": channel, "result": result}, n)
    pending_n, oldest = outbox.stats() if outbox is not None else (0, 0.0)
    yield MetricSample("npu_watchdog_outbox_pending", {}, pending_n)
    yield MetricSample("npu_watchdog_outbox_oldest_age_seconds", {}, oldest)
    yield MetricSample("npu_watchdog_silences_active", {},
                       engine.silences_active() if engine is not None else 0)
    yield from first_seen_samples(rt.config.alerting if engine is not None else None, states)
    health = engine.storage_health() if engine is not None else None
    # Counted by the engine when it decides that an alert fires (watchdog.alerting.decide.interruptions).
    counts = engine.interruptions() if engine is not None else {}
    for domain in DOMAINS:  # every domain's series starts at zero
        if not any(d == domain for d, _ in counts):
            yield MetricSample("npu_watchdog_interruptions_total", {"domain": domain, "cause": "none"}, 0)
    for (domain, cause), n in sorted(counts.items()):
        yield MetricSample("npu_watchdog_interruptions_total", {"domain": domain, "cause": cause}, n)
    yield MetricSample("npu_watchdog_state_writable", {}, 1 if health is None or health.writable else 0)
    yield MetricSample("npu_watchdog_state_write_errors_total", {}, health.errors_total if health else 0)
    dm = engine.deadman if engine is not None else None
    for result in ("ok", "failed"):
        yield MetricSample("npu_watchdog_deadman_pings_total", {"result": result}, dm.counts[result] if dm else 0)


def first_seen_samples(alerting: Any, states: Sequence[Any]) -> Iterator[MetricSample]:
    """One series per firing alert (none when all is well), labelled like the fleet's alerts;
    `alerting` (the engine's config section, None without an engine) names each rule's role."""
    earliest: Dict[Tuple[str, str, str, str, str], float] = {}
    for a in states:
        seen = (a.finding or {}).get("since") or a.firing_since
        if a.state != "firing" or not seen:
            continue
        role = alerting.role(a.rule) if alerting is not None else "root"
        # Alerts differing only in labels not exported here (a chip, a log file) share one series.
        now = a.now_labels  # a broken card's present holder: the fleet's earliest root of that job
        key = (a.rule, role, now.get(JOB_LABEL, ""), now.get("rank", ""), now.get("npu", ""))
        earliest[key] = min(float(seen), earliest.get(key, float(seen)))
    for (rule, role, job, rank, npu), seen in sorted(earliest.items()):
        yield MetricSample("npu_watchdog_alert_first_seen_timestamp_seconds",
                           {"rule": rule, "role": role, JOB_LABEL: job, "rank": rank, "npu": npu}, seen)

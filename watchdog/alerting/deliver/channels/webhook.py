"""Generic webhook in the Alertmanager webhook v4 shape, and the Alertmanager `/api/v2/alerts` push.

Both carry structured data; free text (summaries, log lines) is still defused (`escape_plain`)
because receivers commonly forward annotations into chat.
"""

import time
from typing import Any, Dict, List, Optional

from pydantic import Field, model_validator

from watchdog.compat import Literal  # 3.7: from typing_extensions

from watchdog.host.clock import CLOCK
from watchdog.alerting.deliver.channels.base import AuthedChannelConfig, Channel
from watchdog.alerting.words.digest import MAX_LINE, RuleGroup, runbook_link
from watchdog.alerting.decide.notification import AlertNote
from watchdog.alerting.words.render import Message, escape_plain, runbook_of, safe_url
from watchdog.alerting.words.text import one_line
from watchdog.alerting.words.wording import headline
from watchdog.config.types import Duration, secret_value
from watchdog.core.findings import JOB_LABEL, upgrade_labels
from watchdog.parse.steps import find_step
from watchdog.words import EN, Words

ZERO_TIME = "0001-01-01T00:00:00Z"
#: Ranks listed in one alert's `ranks` annotation at most (a node holds a few dozen).
MAX_RANKS = 4096


def rfc3339(ts: Optional[float]) -> str:
    """A time of the daemon's clock as the receiver's clocks read it (the wall clock now)."""
    if not ts:
        return ZERO_TIME
    ts = CLOCK.to_wall(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1000):03d}Z"


def am_labels(a: AlertNote, alerting: Any = None) -> Dict[str, str]:
    """Alertmanager labels of one alert. In fleet mode also `role` (root/symptom), which the
    shipped templates and the relay use to name the culprit, and `delivery="node"` for the rules
    the node still sends itself (the shipped route drops those)."""
    out = {"alertname": a.rule, "severity": a.severity}
    for k, v in upgrade_labels(dict(a.labels)).items():
        out[k] = escape_plain(v)
    if alerting is not None and alerting.mode == "fleet":
        out["role"] = alerting.role(a.rule)
        if a.rule in alerting.fleet_local_rules:
            out["delivery"] = "node"
    return out


def first_seen(a: AlertNote) -> Optional[float]:
    """When this node first saw the condition: its observed start, else when the alert fired."""
    return a.since or a.starts_at


def annotations(a: AlertNote, max_lines: int, runbook: Optional[str] = None, w: Words = EN) -> Dict[str, str]:
    """Alertmanager's conventions (summary, description, runbook_url) plus our own fields; the
    words (summary, description, hint) in `w`'s language."""
    rule = a.rule
    summary, hint, value = a.summary, a.hint, a.value
    if w is not EN:
        one = RuleGroup(rule, a.severity, [a])
        summary, hint, value = one.summary_in(w), one.hint_in(w), one.value_in(w)
    out = {"summary": escape_plain(one_line(summary, 500))}
    desc = headline(rule, [dict(a.labels)], find_step([a.summary, a.value or ""] + list(a.evidence)), a.count, w=w)
    out["description"] = escape_plain(one_line(desc, 300))
    link = runbook_link(runbook, rule, w.language)
    if link:
        out["runbook_url"] = link
    if hint:
        out["hint"] = escape_plain(one_line(hint, 1000))
    if value not in (None, ""):
        out["value"] = escape_plain(one_line(value, 200))
    ev = [escape_plain(one_line(x, MAX_LINE)) for x in a.evidence][-max_lines:] if max_lines else []
    if ev:
        out["log_lines"] = "\n".join(ev)
    if a.snapshot:
        out["snapshot"] = escape_plain(a.snapshot)
    dashboard = safe_url(a.dashboard)
    if dashboard:
        out["dashboard"] = dashboard
    if a.since:
        out["since"] = rfc3339(a.since)
    ranks = a.ranks
    if ranks and "rank" not in a.labels:
        # A job-level alert (a stall, a job gone): the job's ranks on this node, so the fleet relay
        # counts the ranks it affects (an annotation: the set may change without forking the alert).
        out["ranks"] = ",".join(str(r) for r in ranks[:MAX_RANKS])
    if first_seen(a):
        # Label-free (an annotation), so a later, earlier-looking observation never forks the alert.
        out["first_seen"] = rfc3339(first_seen(a))
    return out


class WebhookConfig(AuthedChannelConfig):
    """A generic webhook receiver (Alertmanager's webhook v4 shape)."""

    type: Literal["webhook"] = "webhook"


class AlertmanagerConfig(AuthedChannelConfig):
    """An Alertmanager (`/api/v2/alerts`): it forgets a firing alert at its `endsAt`, so every
    firing alert is pushed again before then; in fleet mode it collects the node's every alert."""

    type: Literal["alertmanager"] = "alertmanager"
    fleet_sink = True
    #: How often firing alerts are pushed again (must stay below `alert_ttl`: Alertmanager forgets
    #: an alert at its `endsAt`).
    resend_interval: Duration = Field(default="1m")  # type: ignore[assignment]  # parsed by Duration
    #: `endsAt` of a firing alert is the push time plus this.
    alert_ttl: Duration = Field(default="5m")  # type: ignore[assignment]  # parsed by Duration

    @model_validator(mode="after")
    def _ttl(self) -> "AlertmanagerConfig":
        if self.resend_interval >= self.alert_ttl:
            raise ValueError(f"channel {self.name}: resend_interval must be shorter than alert_ttl")
        return self


class _Authed(Channel):
    cfg: AuthedChannelConfig

    def credentials(self) -> List[str]:
        return [secret_value(self.cfg.bearer_token)] + [secret_value(v) for v in self.cfg.headers.values()]

    def base_headers(self, msg: Message) -> Dict[str, str]:
        h = super().base_headers(msg)
        for k, v in self.cfg.headers.items():
            h[k] = secret_value(v)
        if self.cfg.bearer_token is not None:
            h["Authorization"] = "Bearer " + secret_value(self.cfg.bearer_token)
        return h


class WebhookChannel(_Authed):
    type = "webhook"
    config_model = WebhookConfig

    def payload(self, msg: Message) -> Dict[str, Any]:
        max_lines = self.alerting.max_log_lines
        keep = len(msg.alerts)
        while True:
            alerts: List[Dict[str, Any]] = []
            for a in msg.alerts[:keep]:
                status = "resolved" if msg.status == "resolved" else "firing"
                alerts.append({
                    "status": status, "labels": am_labels(a),
                    "annotations": annotations(a, max_lines, runbook_of(self.alerting), self.words),
                    "startsAt": rfc3339(a.starts_at or a.since),
                    "endsAt": rfc3339(a.ends_at) if status == "resolved" else ZERO_TIME,
                    "generatorURL": safe_url(a.dashboard) or "",
                    "fingerprint": a.fp,
                })
            common: Dict[str, str] = dict(alerts[0]["labels"]) if alerts else {}
            for al in alerts[1:]:
                common = {k: v for k, v in common.items() if al["labels"].get(k) == v}
            common_ann: Dict[str, str] = dict(alerts[0]["annotations"]) if alerts else {}
            for al in alerts[1:]:
                common_ann = {k: v for k, v in common_ann.items() if al["annotations"].get(k) == v}
            group = {"host": msg.host, JOB_LABEL: msg.job}
            body = {
                "version": "4",
                "groupKey": "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(group.items())) + "}",
                # Alertmanager's own field for alerts left out to respect a size limit.
                "truncatedAlerts": len(msg.alerts) - keep,
                "status": "resolved" if msg.status == "resolved" else "firing",
                "receiver": self.name,
                "groupLabels": group,
                "commonLabels": common,
                "commonAnnotations": common_ann,
                "externalURL": "",
                "alerts": alerts,
                "title": msg.title(escape_plain, self.words),
                "kind": msg.kind,
                "idempotencyKey": msg.ikey,
                # Sent again after a kill interrupted an attempt: the receiver may have it already
                # (same `idempotencyKey` and `Idempotency-Key` header).
                "possibleRepeat": msg.repeat,
            }
            if self.body_size(body) <= self.max_body or keep <= 1:
                return body
            if max_lines:
                max_lines //= 2
            else:
                keep = max(1, keep * 3 // 4)


class AlertmanagerChannel(_Authed):
    type = "alertmanager"
    config_model = AlertmanagerConfig
    cfg: AlertmanagerConfig

    def __init__(self, cfg, alerting):
        super().__init__(cfg, alerting)
        self.url = self.url.rstrip("/")
        if not self.url.endswith("/api/v2/alerts"):
            self.url += "/api/v2/alerts"

    @property
    def repush_every(self) -> Optional[float]:
        """Alertmanager forgets a firing alert at its `endsAt` (push time + `alert_ttl`)."""
        return self.cfg.resend_interval

    def payload(self, msg: Message) -> List[Dict[str, Any]]:
        now = CLOCK.now()
        fleet = self.alerting.mode == "fleet"
        out = []
        for a in msg.alerts:
            resolved = msg.status == "resolved"
            item: Dict[str, Any] = {
                "labels": am_labels(a, self.alerting),
                "annotations": annotations(a, self.alerting.max_log_lines, runbook_of(self.alerting), self.words),
                # Fleet mode: a firing alert starts when pushed (Alertmanager keeps the earliest of its
                # pushes). A startsAt older than `group_wait` makes Alertmanager flush a new group at
                # once, and the first node would page alone before the others' alerts join it.
                "startsAt": rfc3339(now if fleet and not resolved else (a.starts_at or a.since or now)),
                # Firing: valid until the next push is overdue; resolved: ended now.
                "endsAt": rfc3339(a.ends_at or now) if resolved else rfc3339(now + self.cfg.alert_ttl),
            }
            if fleet and a.starts_at:
                # When this alert (this instance: a recurrence is a new one) fired on the node: the
                # relay tells a new incident from a lagging peer's view of the old one by it.
                item["annotations"]["fired_at"] = rfc3339(a.starts_at)
            link = safe_url(a.dashboard)
            if link:
                item["generatorURL"] = link
            out.append(item)
        return out

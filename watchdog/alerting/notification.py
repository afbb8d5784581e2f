"""What the engine's pure core hands out: typed `Notification` records, made from alert rows.

Why records: the core decides what to send and the shell (and, through the outbox, the channels)
acts on it; a frozen record with named fields is a contract both sides can read, where a dict
of strings was whatever the last writer put in it. The outbox still stores a notification as the
plain JSON body it always was (`Notification.body`): rows queued by an older daemon, the
channels' renderers and the fleet relay read that body, so its keys and their order do not change.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from watchdog.alerting.links import dashboard_link
from watchdog.alerting.records import AlertRow
from watchdog.config.sections.alerting import AlertingConfig
from watchdog.core.findings import SEVERITY_RANK
from watchdog.core.rulecatalog import JOB_LABELS

log = logging.getLogger("watchdog.alerts")

#: The labels a notification's group names (host and training job).
GROUP_LABELS = JOB_LABELS
#: The kinds of notification: a first page, a reminder while firing, the incident's resolve, and
#: a re-push of the firing alerts to a channel that asks for it (`Channel.repush_every`).
KINDS = ("firing", "reminder", "resolved", "refresh")


@dataclass(frozen=True)
class AlertNote:
    """One alert as a notification shows it (the finding's words at the time of the message)."""

    fp: str
    rule: str
    severity: str
    status: str
    summary: str
    labels: Mapping[str, str]
    hint: str
    value: Any
    since: Optional[float]
    starts_at: Optional[float]
    ends_at: Optional[float]
    evidence: Tuple[str, ...]
    snapshot: Optional[str]
    dashboard: Optional[str]
    #: Matching lines behind a log finding (titles say "5 lines"); None for other rules.
    count: Optional[int]
    #: A job-level alert's ranks on this node (the fleet relay counts them).
    ranks: Any
    #: The facts of the finding's own (English) summary in other languages, by language ("zh"):
    #: appended to the rule's summary template there, so no fact is English-only.
    said: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        """The alert in the outbox body (keys in the order rows were always written)."""
        return {
            "fp": self.fp, "rule": self.rule, "severity": self.severity, "status": self.status,
            "summary": self.summary, "labels": dict(self.labels), "hint": self.hint, "value": self.value,
            "since": self.since, "starts_at": self.starts_at, "ends_at": self.ends_at,
            "evidence": list(self.evidence), "snapshot": self.snapshot, "dashboard": self.dashboard,
            "count": self.count, "ranks": self.ranks, "said": dict(self.said),
        }


@dataclass(frozen=True)
class Notification:
    """One message to send: its alerts, most severe first, and the idempotency key (`ikey`) that
    names it in the outbox, in the channels' payloads and as the incident of a first page."""

    kind: str
    status: str
    ikey: str
    created: float
    group: Mapping[str, str]
    alerts: Tuple[AlertNote, ...]
    #: A refresh meant for this one re-pushed channel; None: every channel that takes it.
    only: Optional[str] = None

    def body(self, alerts: Optional[Sequence[AlertNote]] = None) -> Dict[str, Any]:
        """The outbox body, with `alerts` (a channel's share) or all of them."""
        return {"kind": self.kind, "status": self.status, "ikey": self.ikey, "created": self.created,
                "group": dict(self.group), "alerts": [a.to_dict() for a in (self.alerts if alerts is None else alerts)]}

    def rules(self) -> List[str]:
        return [a.rule for a in self.alerts]


def _count(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def alert_note(a: AlertRow, status: str, cfg: AlertingConfig) -> AlertNote:
    """An alert row as the message shows it: the last `max_log_lines` evidence lines, the end time
    only once resolved, the dashboard link of its labels."""
    f = a.finding
    details = f.get("details") or {}
    ev = list(f.get("evidence") or [])[-cfg.max_log_lines:] if cfg.max_log_lines else []
    return AlertNote(
        fp=a.fp, rule=a.rule, severity=a.severity, status=status, summary=f.get("summary", ""),
        labels=dict(a.labels), hint=f.get("hint", ""), value=f.get("value"),
        since=f.get("since") or a.firing_since, starts_at=a.firing_since,
        ends_at=(a.last_seen if status == "resolved" else None), evidence=tuple(ev), snapshot=a.snapshot,
        dashboard=dashboard_link(cfg.dashboard_url, a.labels, a.rule), count=_count(details.get("count")),
        ranks=details.get("job_ranks"), said=_said(details.get("said")))


def _said(v: Any) -> Dict[str, str]:
    """A finding's `said` detail, only text by language (the details are the detectors' data)."""
    return {str(k): str(t) for k, t in v.items() if isinstance(t, str) and t} if isinstance(v, dict) else {}


def notification(kind: str, batch: Iterable[AlertRow], now: float, cfg: AlertingConfig,
                 only: Optional[str] = None) -> Notification:
    """The notification of `kind` for `batch`: alerts sorted most severe first, then by rule and
    labels; its key is derived from the kind, the alerts and the time, so a pass redone after a
    failed commit makes the same key."""
    status = "resolved" if kind == "resolved" else "firing"
    rows = sorted(batch, key=lambda a: (-SEVERITY_RANK.get(a.severity, 0), a.rule, sorted(a.labels.items())))
    first = rows[0].labels
    fps = ",".join(a.fp for a in rows)
    ikey = hashlib.sha256(f"{kind}|{fps}|{now:.6f}".encode()).hexdigest()[:20]
    for a in rows:
        log.info("notify %s %s: %s", kind, a.rule, a.finding.get("summary", ""),
                 extra={"event": f"notify_{kind}", "ikey": ikey})
    return Notification(kind, status, ikey, now, {k: first.get(k, "") for k in GROUP_LABELS},
                        tuple(alert_note(a, status, cfg) for a in rows), only)

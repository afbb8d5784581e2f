"""What the engine's pure core hands out: typed `Notification` records, made from alert rows.

Why records: the core decides what to send and the shell (and, through the outbox, the channels)
acts on it; a frozen record with named fields is a contract both sides can read, where a dict
of strings was whatever the last writer put in it. The record goes all the way: routing hands
each channel its share as a `Notification` (`OutboxItem.note`), the outbox keeps it, and the
channel's payload builder reads its fields. It becomes JSON in one place and comes back in one
place (`Notification.body` / `from_json`): the outbox table stores the plain JSON body it always
stored (same keys, same order), so rows queued by an older daemon, and the fleet relay's
messages, read back as records; a missing or mistyped key gets its default, never an exception
in a sender.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from watchdog.compat import sha256_hex  # not hashlib: see watchdog.compat
from watchdog.alerting.decide.links import dashboard_link
from watchdog.alerting.decide.records import AlertRow
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
    ranks: Optional[Tuple[Any, ...]]
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
            "count": self.count, "ranks": None if self.ranks is None else list(self.ranks), "said": dict(self.said),
        }

    @classmethod
    def from_json(cls, d: Any) -> "AlertNote":
        """An alert of a stored body (this version's, an older daemon's, the relay's): each field
        of the type the record says, a missing or mistyped one its default (a record passes as
        it is)."""
        if isinstance(d, AlertNote):
            return d
        d = d if isinstance(d, dict) else {}
        ev = d.get("evidence")
        return cls(
            fp=_text(d.get("fp")), rule=_text(d.get("rule")), severity=_text(d.get("severity")) or "info",
            status=_text(d.get("status")) or "firing", summary=_text(d.get("summary")),
            labels=_strings(d.get("labels")), hint=_text(d.get("hint")), value=d.get("value"),
            since=_time(d.get("since")), starts_at=_time(d.get("starts_at")), ends_at=_time(d.get("ends_at")),
            evidence=tuple(str(x) for x in ev) if isinstance(ev, (list, tuple)) else (),
            snapshot=_text(d.get("snapshot")) or None, dashboard=_text(d.get("dashboard")) or None,
            count=_count(d.get("count")), ranks=_ranks(d.get("ranks")),
            said=_said(d.get("said")))


@dataclass(frozen=True)
class FleetCounts:
    """What the fleet relay's message says of the whole training job's incident (over every
    node), beside the alerts it shows whole."""

    nodes: int = 0
    ranks: int = 0
    symptoms: int = 0
    #: Whether the culprit shown is a root cause (else the earliest symptom).
    culprit_root: bool = False
    #: Symptom rule -> how many of its alerts the incident holds.
    symptom_rules: Mapping[str, int] = field(default_factory=dict)
    #: Every count of the relay, as it sent them (the JSON form keeps what this record does not name).
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Any) -> Optional["FleetCounts"]:
        if not isinstance(d, dict) or not d:
            return None
        rules = d.get("symptom_rules")
        return cls(_int(d.get("nodes")), _int(d.get("ranks")), _int(d.get("symptoms")), bool(d.get("culprit_root")),
                   {str(k): _int(v) for k, v in rules.items()} if isinstance(rules, dict) else {}, dict(d))


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
    #: Sent again after an earlier attempt was interrupted before its outcome was recorded: the
    #: receiver may have it already (set by the outbox when it sends such a row).
    repeat: bool = False
    #: The fleet relay's message: the job's incident over every node (None for a node's own).
    incident: Optional[FleetCounts] = None

    def body(self, alerts: Optional[Sequence[AlertNote]] = None) -> Dict[str, Any]:
        """The JSON form (the outbox body), with `alerts` (a channel's share) or all of them; the
        keys rows were always written with, then `repeat` and `incident` only when set."""
        out = {"kind": self.kind, "status": self.status, "ikey": self.ikey, "created": self.created,
               "group": dict(self.group), "alerts": [a.to_dict() for a in (self.alerts if alerts is None else alerts)]}
        if self.incident is not None:
            out["incident"] = dict(self.incident.raw)
        if self.repeat:
            out["repeat"] = True
        return out

    def share(self, alerts: Sequence[AlertNote]) -> "Notification":
        """The part of this notification one channel gets (routing keeps its alerts)."""
        return replace(self, alerts=tuple(alerts), only=None)

    @property
    def test(self) -> bool:
        """A `test-alert` message (kind `test`)."""
        return self.kind == "test"

    def rules(self) -> List[str]:
        return [a.rule for a in self.alerts]


class OutboxItem(NamedTuple):
    """A notification committed for one channel: the channel's name, the notification's key and
    kind, and the channel's share of it (see watchdog.alerting.decide.routing); the store writes it as
    JSON (`to_json`) and gives it back as a record (`from_json`)."""

    channel: str
    ikey: str
    kind: str
    note: "Notification"


def to_json(note: Union[Notification, Mapping[str, Any]]) -> Dict[str, Any]:
    """The JSON form of a notification (one already in that form, a test's or the relay's,
    passes as it is)."""
    return note.body() if isinstance(note, Notification) else dict(note)


def from_json(body: Union[Notification, Mapping[str, Any]]) -> Notification:
    """The record of a notification's JSON form: what this version wrote, what an older daemon
    queued (the legacy `job` group label included), what the relay or `test-alert` built. A
    missing or mistyped key gets its default; nothing here raises on a stored row."""
    if isinstance(body, Notification):
        return body
    d: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
    alerts = d.get("alerts")
    created = _time(d.get("created"))
    return Notification(
        kind=_text(d.get("kind")) or "firing", status=_text(d.get("status")) or "firing", ikey=_text(d.get("ikey")),
        created=float(created) if created is not None else 0.0, group=_strings(d.get("group")),
        alerts=tuple(AlertNote.from_json(a) for a in alerts) if isinstance(alerts, (list, tuple)) else (),
        repeat=bool(d.get("repeat")), incident=FleetCounts.from_json(d.get("incident")))


def _count(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _ranks(v: Any) -> Optional[Tuple[Any, ...]]:
    return tuple(v) if isinstance(v, (list, tuple)) else None


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return 0


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def _time(v: Any) -> Optional[float]:
    """A time as stored (seconds), or None for anything else."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _strings(v: Any) -> Dict[str, str]:
    """Labels as stored: text to text (None for a value becomes "")."""
    return {str(k): _text(x) for k, x in v.items()} if isinstance(v, dict) else {}


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
        ranks=_ranks(details.get("job_ranks")), said=_said(details.get("said")))


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
    ikey = sha256_hex(f"{kind}|{fps}|{now:.6f}".encode())[:20]
    for a in rows:
        log.info("notify %s %s: %s", kind, a.rule, a.finding.get("summary", ""),
                 extra={"event": f"notify_{kind}", "ikey": ikey})
    return Notification(kind, status, ikey, now, {k: first.get(k, "") for k in GROUP_LABELS},
                        tuple(alert_note(a, status, cfg) for a in rows), only)

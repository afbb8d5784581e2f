"""Pure: an Alertmanager webhook (v4) payload -> one job incident -> an outbox message body.

Why a separate incident view: Alertmanager groups the alerts of every node of a training job, but
lists them in its own order. On-call needs the failure that came first: the root-cause alerts
(`role="root"`, set by the node daemons in fleet mode) before the symptoms, each set ordered by
`first_seen`, the time the node first saw the condition. Symptoms are counted, not listed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from watchdog.core.findings import JOB_LABEL, SEVERITY_RANK

#: Labels that are Alertmanager or fleet bookkeeping, not where the alert is.
_META = ("alertname", "severity", "role", "delivery", "host", JOB_LABEL)
#: Root alerts shown whole in one message (the earliest first); the others are counted.
MAX_ROOTS_SHOWN = 3
MAX_ALERTS = 100_000
#: Ranks read from one alert's `ranks` annotation at most.
MAX_RANKS = 4096


class PayloadError(ValueError):
    """The request is not an Alertmanager webhook payload this relay can read."""


def parse_time(text: Any) -> Optional[float]:
    """RFC 3339 (Alertmanager's, with or without fractional seconds) -> epoch; None if absent or
    unreadable (the zero time `0001-01-01...` counts as absent)."""
    if not isinstance(text, str) or not text or text.startswith("0001-"):
        return None
    s = text.strip().replace("Z", "+00:00")
    if "." in s:  # Python 3.9 reads at most 6 fractional digits; Go writes up to 9
        head, _, rest = s.partition(".")
        digits = "".join(c for c in rest if c.isdigit())
        s = head + "." + (digits[:6] or "0") + rest[len(digits):]
    try:
        return datetime.fromisoformat(s).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class FleetAlert:
    """One node's alert as Alertmanager holds it."""

    rule: str
    severity: str
    role: str
    host: str
    labels: Dict[str, str]
    annotations: Dict[str, str]
    first_seen: float
    #: When this instance of the alert fired on its node (a recurrence fires anew).
    fired_at: float
    status: str
    ends_at: Optional[float]

    def ranks(self) -> List[str]:
        """The ranks this alert is about: its `rank` label, else its `ranks` annotation."""
        if "rank" in self.labels:
            return [self.labels["rank"]]
        listed = self.annotations.get("ranks", "")
        return [r.strip() for r in listed.split(",", MAX_RANKS)[:MAX_RANKS] if r.strip()]

    def sort_key(self) -> Tuple[int, float, str, str]:
        return (0 if self.role == "root" else 1, self.first_seen, self.host, self.rule)


def _strings(d: Any, what: str) -> Dict[str, str]:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise PayloadError(f"{what} must be an object")
    for k, v in d.items():
        if isinstance(v, (dict, list)):
            raise PayloadError(f"{what}.{str(k)[:60]} must be a string, not a {'list' if isinstance(v, list) else 'object'}")
    return {str(k): str(v) for k, v in d.items()}


#: An Alertmanager webhook body is 4 levels deep (payload, alerts, alert, labels): anything much
#: deeper is not one, and is refused before any code walks it recursively.
MAX_DEPTH = 16


def _check_depth(doc: Any, limit: int = MAX_DEPTH) -> None:
    """Iterative (no recursion whatever the input): PayloadError past `limit` levels."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise PayloadError(f"nested deeper than {limit} levels: not an Alertmanager webhook payload")
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def load_payload(data: bytes) -> "Incident":
    """A webhook body (bytes) -> Incident. Every malformed body is a PayloadError (an HTTP 4xx),
    never another exception: not UTF-8, not JSON, nested too deep for the decoder or deeper than
    MAX_DEPTH, or not of the payload's shape."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise PayloadError(f"nested deeper than {MAX_DEPTH} levels: not an Alertmanager webhook payload") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise PayloadError(f"not a JSON document: {str(exc)[:200]}") from None
    _check_depth(doc)
    return parse_payload(doc)


def read_alert(raw: Any, i: int) -> FleetAlert:
    if not isinstance(raw, dict):
        raise PayloadError(f"alerts[{i}] must be an object")
    labels = _strings(raw.get("labels"), f"alerts[{i}].labels")
    ann = _strings(raw.get("annotations"), f"alerts[{i}].annotations")
    seen = parse_time(ann.get("first_seen")) or parse_time(raw.get("startsAt")) or 0.0
    sev = labels.get("severity", "warning")
    return FleetAlert(
        rule=labels.get("alertname", "?"), severity=sev if sev in SEVERITY_RANK else "warning",
        role=labels.get("role", "root"), host=labels.get("host", labels.get("instance", "?")),
        labels=labels, annotations=ann, first_seen=seen, fired_at=parse_time(ann.get("fired_at")) or seen, status=str(raw.get("status", "firing")),
        ends_at=parse_time(raw.get("endsAt")))


@dataclass(frozen=True)
class Incident:
    """One Alertmanager group (one training job's incident), alerts earliest root first."""

    group_key: str
    status: str
    job: str
    alerts: Tuple[FleetAlert, ...]

    @property
    def scope(self) -> str:
        """What one incident is: the training job, whichever route's group reported it (the
        shipped config pages log-visible root causes from a faster route whose group holds only
        them); without a job label, the group itself."""
        return f"job\x00{self.job}" if self.job else self.group_key

    @property
    def roots(self) -> List[FleetAlert]:
        return [a for a in self.alerts if a.role == "root"]

    @property
    def culprit(self) -> Optional[FleetAlert]:
        return self.alerts[0] if self.alerts else None

    def counts(self) -> Dict[str, int]:
        """Nodes, ranks affected, roots and symptoms. A rank-level alert counts its `rank`; a
        job-level one (a stall, a job gone: no `rank` label) the job's ranks on its node, which
        the node lists in its `ranks` annotation; each (node, rank) once."""
        ranks: Set[Tuple[str, str]] = set()
        for a in self.alerts:
            ranks.update((a.host, r) for r in a.ranks())
        return {"nodes": len({a.host for a in self.alerts}), "ranks": len(ranks),
                "roots": len(self.roots), "symptoms": len(self.alerts) - len(self.roots)}


def parse_payload(doc: Any) -> Incident:
    """Validate the webhook body; raises PayloadError naming what is wrong."""
    if not isinstance(doc, dict):
        raise PayloadError("expected a JSON object (Alertmanager webhook payload)")
    if str(doc.get("version", "")) != "4":
        raise PayloadError(f"unsupported payload version {doc.get('version')!r} (expected \"4\")")
    raw = doc.get("alerts")
    if not isinstance(raw, list) or not raw:
        raise PayloadError("alerts must be a non-empty list")
    if len(raw) > MAX_ALERTS:
        raise PayloadError(f"{len(raw)} alerts in one group (at most {MAX_ALERTS})")
    key = doc.get("groupKey")
    if not isinstance(key, str) or not key:
        raise PayloadError("groupKey is missing")
    alerts = sorted((read_alert(a, i) for i, a in enumerate(raw)), key=FleetAlert.sort_key)
    group = _strings(doc.get("groupLabels"), "groupLabels")
    common = _strings(doc.get("commonLabels"), "commonLabels")
    job = group.get(JOB_LABEL) or common.get(JOB_LABEL) or alerts[0].labels.get(JOB_LABEL, "")
    status = "resolved" if doc.get("status") == "resolved" else "firing"
    return Incident(key, status, job, tuple(alerts))


def alert_body(a: FleetAlert, status: str) -> Dict[str, Any]:
    """A fleet alert in the shape the channels render (the node daemon's alert body)."""
    where = {k: v for k, v in a.labels.items() if k not in _META}
    where["node"] = a.host
    ann = a.annotations
    return {"fp": "", "rule": a.rule, "severity": a.severity, "status": status,
            "summary": ann.get("summary", ""), "labels": where, "hint": ann.get("hint", ""),
            "value": ann.get("value"), "since": a.first_seen or None, "starts_at": a.first_seen or None,
            "ends_at": a.ends_at if status == "resolved" else None,
            "evidence": [x for x in ann.get("log_lines", "").split("\n") if x],
            "snapshot": ann.get("snapshot"), "dashboard": ann.get("dashboard")}


def incident_key(group_key: str) -> str:
    return hashlib.sha256(group_key.encode("utf-8")).hexdigest()[:16]


def message_body(inc: Incident, kind: str, now: float, started: float) -> Dict[str, Any]:
    """The outbox body of this incident's message: the earliest root alerts (or, with no root,
    the earliest symptom) shown whole, everything else counted in `incident`."""
    status = "resolved" if kind == "resolved" else "firing"
    shown = inc.roots[:MAX_ROOTS_SHOWN] or list(inc.alerts[:1])
    c = inc.culprit
    assert c is not None
    ikey = hashlib.sha256(f"{inc.group_key}|{kind}|{started:.6f}|{bool(inc.roots)}".encode()).hexdigest()[:20]
    rules: Dict[str, int] = {}
    for a in inc.alerts:
        if a.role != "root":
            rules[a.rule] = rules.get(a.rule, 0) + 1
    return {
        "kind": kind, "status": status, "ikey": ikey, "created": now,
        "group": {"host": c.host, JOB_LABEL: inc.job},
        "alerts": [alert_body(a, status) for a in shown],
        "incident": dict(inc.counts(), culprit_root=c.role == "root", symptom_rules=rules),
    }


def resolved_body(paged: Dict[str, Any], now: float) -> Dict[str, Any]:
    """The resolved message repeats what was paged (the culprit and the counts at the time), not
    Alertmanager's last view: it lists only the alerts that resolved last, and the root cause
    usually resolved first."""
    ikey = hashlib.sha256(f"{paged['ikey']}|resolved".encode()).hexdigest()[:20]
    alerts = [dict(a, status="resolved", ends_at=a.get("ends_at") or now) for a in paged["alerts"]]
    return dict(paged, kind="resolved", status="resolved", ikey=ikey, created=now, alerts=alerts)

"""Routing: which channel gets which alerts of a notification (severity floor + label matchers)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional

from watchdog.config.sections.alerting import Matcher
from watchdog.core.findings import SEVERITY_RANK


def match_labels(labels: Dict[str, str], rule: str, severity: str) -> Dict[str, str]:
    """What silences and channel matchers see: the labels plus `rule` and `severity`."""
    return {**labels, "rule": rule, "severity": severity}


def matches_all(matchers: List[Matcher], labels: Dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


def route(note: Dict[str, Any], channels: Iterable[Any],
          direct: Optional[Callable[[str, str], bool]] = None) -> List[tuple]:
    """One outbox row (channel, ikey, kind, body) per channel that takes at least one alert of
    the notification; a note with `only` goes to that channel alone. `direct(channel type, rule)`
    says whether this node sends the rule to that kind of channel at all (fleet mode)."""
    items = []
    only = note.get("only")
    body = {k: v for k, v in note.items() if k != "only"}
    for ch in channels:
        if only is not None and ch.name != only:
            continue
        if note["status"] == "resolved" and not ch.send_resolved:
            continue
        floor = SEVERITY_RANK[ch.cfg.min_severity]
        keep = [a for a in note["alerts"] if SEVERITY_RANK.get(a["severity"], 0) >= floor
                and (direct is None or direct(ch.type, a["rule"]))
                and matches_all(ch.cfg.matchers, match_labels(a["labels"], a["rule"], a["severity"]))]
        if keep:
            items.append((ch.name, note["ikey"], note["kind"], dict(body, alerts=keep)))
    return items

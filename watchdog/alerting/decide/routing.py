"""Routing: which channel gets which alerts of a notification (severity floor + label matchers)."""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence

from watchdog.compat import Protocol  # 3.7: from typing_extensions

from watchdog.alerting.decide.notification import Notification, OutboxItem
from watchdog.config.sections.alerting import ChannelConfig, LabelMatcher
from watchdog.core.findings import SEVERITY_RANK

class RouteTarget(Protocol):
    """What routing reads of a channel (watchdog.alerting.deliver.channels.Channel has it)."""

    name: str
    type: str
    cfg: ChannelConfig

    @property
    def send_resolved(self) -> bool: ...

    @property
    def repush_every(self) -> Optional[float]:
        """How often the channel's receiver wants every firing alert again (None: never)."""


def match_labels(labels: Dict[str, str], rule: str, severity: str) -> Dict[str, str]:
    """What silences and channel matchers see: the labels plus `rule` and `severity`."""
    return {**labels, "rule": rule, "severity": severity}


def matches_all(matchers: Sequence[LabelMatcher], labels: Dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


def route(note: Notification, channels: Iterable[RouteTarget],
          direct: Optional[Callable[[str, str], bool]] = None) -> List[OutboxItem]:
    """One outbox row per channel that takes at least one alert of the notification; a note with
    `only` goes to that channel alone. `direct(channel type, rule)` says whether this node sends
    the rule to that kind of channel at all (fleet mode)."""
    items = []
    for ch in channels:
        if note.only is not None and ch.name != note.only:
            continue
        if note.status == "resolved" and not ch.send_resolved:
            continue
        floor = SEVERITY_RANK[ch.cfg.min_severity]
        keep = [a for a in note.alerts if SEVERITY_RANK.get(a.severity, 0) >= floor
                and (direct is None or direct(ch.type, a.rule))
                and matches_all(ch.cfg.matchers, match_labels(dict(a.labels), a.rule, a.severity))]
        if keep:
            items.append(OutboxItem(ch.name, note.ikey, note.kind, note.share(keep)))
    return items

"""The records the engine's decisions are made of: an alert's memory (`AlertRow`) and a silence
(`Silence`); a notification and its share for one channel are in `notification`.

Why a module of their own: the decide stage (the pure core, `lifecycle`, `muting`, `grouping`,
`routing`, `notification`) works on these and must not depend on how they are kept. The store
(`watchdog.alerting.deliver.store`) saves and loads them in SQLite and imports them from here; nothing
here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from watchdog.host import clock


@dataclass
class AlertRow:
    """The engine's memory of one fingerprint (see engine.py for the state machine)."""

    fp: str
    rule: str
    severity: str
    labels: Dict[str, str]
    finding: Dict[str, Any]
    state: str  # "pending" | "firing" | "resolved" (sent, waiting for the rest of its incident)
    pending_since: float
    firing_since: Optional[float] = None
    last_seen: float = 0.0
    notified: bool = False
    last_notified: Optional[float] = None
    snapshot: Optional[str] = None
    #: Why the last flush did not send it ("silenced:<id>", "inhibited:<rule>") or None.
    muted: Optional[str] = None
    #: The firing message (its idempotency key) this alert was first sent in: the alerts of one
    #: incident resolve together, in one message, when the last of them has resolved.
    incident: Optional[str] = None
    #: Restored after a restart: held (neither resolved nor re-paged) until this time, while its
    #: detector warms up again. In memory only: every start computes it afresh.
    held_until: Optional[float] = None
    #: Seconds of fresh evidence its detector needs after a restart (in memory only).
    warmup: float = 0.0
    #: When the cause that muted it (inhibition) cleared while it still fired unsent: it pages
    #: only if it is still there after the release hold (in memory only).
    released_at: Optional[float] = None

    @property
    def now_labels(self) -> Dict[str, str]:
        """The labels of its latest finding. They differ from `labels` (those it paged with, which
        route its resolved message) only in a finding's context: the job holding a broken card
        now. Inhibition, silences and metrics ask about the present."""
        got = self.finding.get("labels") if isinstance(self.finding, dict) else None
        return got if isinstance(got, dict) else self.labels


@dataclass
class Silence:
    id: str
    matchers: List[str]
    starts_at: float
    ends_at: float
    created_by: str
    comment: str
    created_at: float = field(default_factory=clock.now)

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

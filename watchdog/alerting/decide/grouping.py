"""Grouping: firing alerts of one host, job and subject that start together go out as one message.

The first alert of a group opens a short window (`alerting.group_window`, default 2 s): the
lines of one event (a NaN on eight ranks, an OOM and its traceback) arrive within a round or two
and share the message, while the page itself is not held back. Cascades that follow minutes
later (peers timing out in HCCL, ranks dying) are folded by inhibition, not by waiting.

The rule's subject (`Rule.subject`) is part of the key: an alert about the watchdog itself (a
probe down, npu-smi failing, offsets it cannot save) never shares a message with the training
job's alerts. The alerts of one message resolve together, so sharing would make the watchdog's
short trouble wait for a NaN's hour-long hold before resolving, and the reverse.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from watchdog.alerting.decide.records import AlertRow
from watchdog.core.rulecatalog import JOB_LABELS, subject


def group_key(a: AlertRow) -> str:
    """host, job and what the alert is about (the training job, or the watchdog itself)."""
    return ",".join([f"{k}={a.labels.get(k, '')}" for k in JOB_LABELS] + [f"subject={subject(a.rule)}"])


class Groups:
    """Open groups: group key -> the time their message is due."""

    def __init__(self) -> None:
        self.deadlines: Dict[str, float] = {}

    def add(self, a: AlertRow, now: float, window: float, at: Optional[float] = None) -> None:
        """Schedule an alert's group `window` after it fired, or at `at` (a released alert: now,
        or when its release hold ends); never later than the group was due already."""
        own = max(now, (a.firing_since or now) + window if at is None else at)
        g = group_key(a)
        self.deadlines[g] = min(self.deadlines.get(g, own), own)

    def due(self, now: float) -> List[str]:
        """Groups whose message is due now (removed from the open set)."""
        out = [g for g, t in self.deadlines.items() if t <= now]
        for g in out:
            del self.deadlines[g]
        return out

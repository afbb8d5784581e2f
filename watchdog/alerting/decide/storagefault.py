"""The alert engine against a state folder that cannot be written (read-only, full, deleted).

Why this exists: a pass of the engine changes its in-memory alerts (an alert marked as sent, a
resolved one deleted) and then commits them together with the notifications they cause. If the
commit fails and the memory keeps the change, the alert is "sent" in memory while its message was
never queued: the page is lost for good. So a pass starts from a `SavePoint`, and a failed commit
puts the memory back as it was; the next pass (at most STORAGE_RETRY later) computes the same
change again and commits it, so the page goes out, once, when the folder can be written.

What a rolled-back pass learnt that is not a claim about sending is kept (`Carry`): when a new
finding was first seen (so its `for` counts from then, not from the end of the fault) and the
snapshot it already asked for (so the evidence is not captured twice).
"""

from __future__ import annotations

import copy
import logging
import sqlite3
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from watchdog.alerting.decide.records import AlertRow

#: Errors of the state folder's storage: SQLite's and the file system's. A pass that meets one is
#: rolled back and retried; it never reaches the daemon's main loop.
STORAGE_ERRORS = (sqlite3.Error, OSError)
#: How soon a pass whose commit failed is tried again.
STORAGE_RETRY = 2.0


def describe(exc: BaseException) -> str:
    """A short reason for logs and the alert ("database or disk is full", "[Errno 30] ...")."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


@dataclass
class StorageHealth:
    """The state folder as the engine's commits see it (metrics, /healthz, status)."""

    #: Why the last commit failed ("" while commits succeed).
    error: str = ""
    #: When the current episode of failed commits began (None: the folder is writable).
    since: Optional[float] = None
    #: Commits (or attempts to re-create the folder) that failed, since the daemon started.
    errors_total: int = 0
    #: The `state_unwritable` alert sent for the current episode (its resolve reuses it).
    row: Optional[AlertRow] = None
    #: Re-pushed channel -> when the episode's alert was last sent there (a receiver that forgets
    #: a firing alert unless it is sent again, like every firing alert: see EngineCore._repush).
    refreshed: Dict[str, float] = field(default_factory=dict)

    @property
    def writable(self) -> bool:
        return self.since is None


#: fp -> (first seen, snapshot path) of alerts created by a rolled-back pass.
Carry = Dict[str, Tuple[float, Optional[str]]]


@dataclass
class SavePoint:
    """The engine's memory before a pass: its alerts (copied row by row: a pass changes rows in
    place), the open group windows, the channels' re-push times and the interruption counts."""

    alerts: Dict[str, AlertRow]
    deadlines: Dict[str, float]
    repushed: Dict[str, float] = field(default_factory=dict)
    #: The interruptions counted so far (a pass that fires an alert counts it).
    interruptions: Dict[Tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def take(cls, alerts: Mapping[str, AlertRow], deadlines: Mapping[str, float],
             repushed: Mapping[str, float],
             interruptions: Optional[Mapping[Tuple[str, str], int]] = None) -> "SavePoint":
        return cls({fp: copy.copy(a) for fp, a in alerts.items()}, dict(deadlines), dict(repushed),
                   dict(interruptions or {}))

    def restore(self, alerts: Dict[str, AlertRow], deadlines: Dict[str, float],
                repushed: Dict[str, float]) -> Carry:
        """Put the memory back as it was (in place: callers hold these dicts); returns what the
        failed pass learnt about alerts it created. A snapshot the failed pass took for an alert
        that existed before is kept on that alert."""
        carry: Carry = {}
        for fp, a in alerts.items():
            before = self.alerts.get(fp)
            if before is None:
                carry[fp] = (a.pending_since, a.snapshot)
            elif a.snapshot and not before.snapshot:
                before.snapshot = a.snapshot
        alerts.clear()
        alerts.update(self.alerts)
        deadlines.clear()
        deadlines.update(self.deadlines)
        repushed.clear()
        repushed.update(self.repushed)
        return carry


def apply_carry(alerts: Mapping[str, AlertRow], carry: Carry, present: Mapping[str, object]) -> None:
    """After a pass observed its findings: alerts a rolled-back pass had created keep their first
    sighting and their snapshot. Entries of findings gone meanwhile are dropped (a finding that
    comes back later is a new one)."""
    for fp in [fp for fp in carry if fp not in present]:
        del carry[fp]
    for fp, (first_seen, snapshot) in carry.items():
        a = alerts.get(fp)
        if a is None:
            continue
        if a.state == "pending" and first_seen < a.pending_since:
            a.pending_since = first_seen
        if snapshot and not a.snapshot:
            a.snapshot = snapshot


class RedoQuiet(logging.Filter):
    """Passes redone after failed commits would log "finding pending" and "alert firing" again
    at every retry (every 2 s for as long as the disk is full): the lines of alerts a rolled-back
    pass created (those in the carry) are logged the first time only."""

    EVENTS = ("finding_new", "alert_firing")

    def __init__(self, carry: Carry):
        super().__init__()
        self.carry = carry

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "event", None) not in self.EVENTS:
            return True
        finding = getattr(record, "finding", None)
        return not isinstance(finding, dict) or finding.get("key") not in self.carry

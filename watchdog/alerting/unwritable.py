"""`state_unwritable`: what the engine says while its state folder cannot be written.

Why apart from the engine's passes: the store is what fails, so this alert cannot go through it.
The first failed commit of an episode logs once and sends `state_unwritable` from memory (the
outbox's `send_from_memory`, same senders and retries); a channel that wants firing alerts
pushed again (`Channel.repush_every`) hears it again every
`resend_interval` as it would a stored firing alert; the first commit that succeeds resolves it.
See watchdog.alerting.decide.storagefault for how a failed pass is rolled back and redone.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from watchdog.alerting.decide.notification import notification
from watchdog.alerting.deliver.outbox import Outbox
from watchdog.alerting.decide.routing import route
from watchdog.alerting.decide.storagefault import STORAGE_RETRY, StorageHealth, describe
from watchdog.alerting.decide.records import AlertRow
from watchdog.config.sections.alerting import AlertingConfig
from watchdog.core.findings import Finding

log = logging.getLogger("watchdog.alerts")


class UnwritableEpisode:
    """The state folder as the engine's commits see it (`health`), and the alert of an episode."""

    def __init__(self, outbox: Outbox):
        self.outbox = outbox
        self.health = StorageHealth()

    def failed(self, exc: BaseException, now: float, state_dir: str, finding: Callable[[], Finding]) -> None:
        """A commit failed: count it; the first of an episode is logged and `state_unwritable`
        (`finding()`, called once the episode's error is known) is sent directly."""
        h = self.health
        h.errors_total += 1
        h.error = describe(exc)
        if h.since is not None:
            log.debug("state folder still not writable: %s", h.error)
            self._refresh(now)
            return
        h.since = now
        log.error("cannot write the state folder %s (%s): new alerts are held in memory and sent once it can be "
                  "written; retrying every %gs", state_dir, h.error, STORAGE_RETRY,
                  extra={"event": "state_unwritable"})
        f = finding()
        h.row = AlertRow(f.key, f.rule, f.severity, dict(f.labels), f.to_dict(), "firing", now, now, now)
        self._send("firing", h.row, now)
        h.refreshed = {ch.name: now for ch in self.outbox.channels.values() if ch.repush_every is not None}

    def ok(self, now: float, state_dir: str) -> None:
        """A commit succeeded: an episode under way ends, and its alert resolves."""
        h = self.health
        if h.since is None:
            return
        log.warning("the state folder %s can be written again after %.0fs; held alerts go out now",
                    state_dir, now - h.since, extra={"event": "state_writable"})
        if h.row is not None:
            h.row.last_seen = now
            self._send("resolved", h.row, now)
        h.since, h.error, h.row, h.refreshed = None, "", None, {}

    def _refresh(self, now: float) -> None:
        """A receiver that forgets a firing alert unless it is sent again hears the episode's
        alert every `repush_every`, as the core's re-push does for stored ones."""
        h = self.health
        for ch in self.outbox.channels.values():
            every = ch.repush_every
            if h.row is None or every is None or ch.name not in h.refreshed:
                continue
            if now - h.refreshed[ch.name] >= every:
                h.refreshed[ch.name] = now
                self._send("refresh", h.row, now, only=ch.name)

    def _send(self, kind: str, row: AlertRow, now: float, only: Optional[str] = None) -> None:
        """Through the channels' senders, from memory: nothing of this touches the state folder."""
        cfg: AlertingConfig = self.outbox.config
        note = notification(kind, [row], now, cfg, only=only)
        self.outbox.send_from_memory(route(note, list(self.outbox.channels.values()), cfg.sends_direct))

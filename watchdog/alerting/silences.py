"""The silences the engine's shell reads from the store and hands each pass of the core as data.

Why apart from `muting`: muting decides (pure, no I/O); this reads SQLite, written by
`npu-watchdog silence add` from another process, and only when the table may have changed.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Dict, List, Optional, Tuple

from watchdog.host.clock import CLOCK
from watchdog.alerting.decide.muting import ActiveSilences
from watchdog.alerting.deliver.store import AlertStore, Silence
from watchdog.config.sections.alerting import LabelMatcher, parse_matcher

log = logging.getLogger("watchdog.alerts")


class Muter:
    """Silences from the store (kept in memory, re-read only when they may have changed); the
    engine's shell owns it and hands each pass of the core an `ActiveSilences`."""

    def __init__(self, store: AlertStore):
        self.store = store
        self.active: List[Tuple[Silence, List[LabelMatcher]]] = []
        self._cache: Dict[str, List[LabelMatcher]] = {}
        self._last_prune = 0.0
        self._silences: List[Silence] = []
        self._version: Optional[tuple] = None

    def load_silences(self, now: float) -> None:
        """The silences active at `now`. The table is read again only when another process (the
        `silence` CLI) or this one wrote since the last read; a silence's start or end passing
        needs no read (see `next_change`)."""
        version = self.store.silences_version()
        if version != self._version:
            self._silences = self.store.silences()
            self._version = version
            ids = {s.id for s in self._silences}
            self._cache = {k: v for k, v in self._cache.items() if k in ids}
        active = []
        # Silences are written on the wall clock (the `silence` CLI); the engine's `now` is the
        # daemon's step-free clock (watchdog.host.clock).
        wall = CLOCK.to_wall(now)
        for s in self._silences:
            if not s.active(wall):
                continue
            ms = self._cache.get(s.id)
            if ms is None:
                try:
                    ms = [parse_matcher(m) for m in s.matchers]
                except ValueError:
                    ms = []
                self._cache[s.id] = ms
            if ms:
                active.append((s, ms))
        self.active = active
        if now - self._last_prune > 3600:
            self._last_prune = now
            try:
                self.store.prune_silences(wall - 7 * 86400)
            except (sqlite3.Error, OSError) as exc:  # housekeeping: the state folder's fault is reported elsewhere
                log.debug("pruning old silences failed: %s", exc)

    def known(self) -> List[Silence]:
        """Every silence as last read from the store (what a rebuilt database must hold again)."""
        return list(self._silences)

    def changed(self) -> bool:
        """Whether the silences may have changed since the last read (one cheap query)."""
        return self.store.silences_version() != self._version

    def next_change(self, now: float) -> float:
        """When the set of active silences changes next by time alone (a start or an end after
        `now`; infinity when none): the engine's timer wakes then."""
        # The same conversion as `load_silences` (a step, not the drift under STEP_SECONDS): with
        # the raw offset a wall clock drifted ahead put the end of a silence before the moment
        # `load_silences` lets it end, so the timer woke too early, found it still active and
        # slept until the next pass (seconds late; a race of the engine's tests on a VM).
        shift = CLOCK.to_wall(now) - now
        times = [t - shift for s in self._silences for t in (s.starts_at, s.ends_at) if t - shift > now]
        return min(times, default=float("inf"))

    def view(self, now: float) -> ActiveSilences:
        """The silences last loaded (`load_silences`) as the core sees them."""
        return ActiveSilences(tuple((s, tuple(ms)) for s, ms in self.active), self.next_change(now))

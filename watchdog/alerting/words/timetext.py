"""Times as the on-call person reads them: in the team's time zone, with the UTC offset printed,
and how long ago ("since 22:16:40 +08:00, 3m ago").

Why a module of its own: the zone is configuration (`alerting.display_timezone`), validated once
at load time with a message naming the bad zone, and every channel formats times the same way.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Optional

from watchdog.host.clock import CLOCK
from watchdog.config.types import format_duration, load_zone

def ago(seconds: float) -> str:
    """`3m ago`, `1h5m ago`, `just now`; whole seconds only, minutes once past ten minutes."""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return "just now"
    if seconds >= 600:
        seconds = seconds - seconds % 60
    return f"{format_duration(seconds)} ago"


@dataclass(frozen=True)
class TimeText:
    """Formats epoch seconds in one zone; `now` is fixed per message so every line agrees."""

    zone: _dt.tzinfo = _dt.timezone.utc
    now: Optional[float] = None

    @classmethod
    def named(cls, name: str, now: Optional[float] = None) -> "TimeText":
        try:
            zone = load_zone(name)
        except ValueError:
            zone = _dt.timezone.utc  # config validation already refused it; never fail a message
        return cls(zone, now)

    def _now(self) -> float:
        return CLOCK.now() if self.now is None else self.now

    def stamp(self, ts: float) -> str:
        """`2026-11-30 22:16:40 +08:00`: the offset, not a zone abbreviation, is unambiguous. `ts`
        is a time of the daemon's clock, shown as the wall clock reads it now."""
        t = _dt.datetime.fromtimestamp(CLOCK.to_wall(ts), self.zone)
        off = t.strftime("%z")
        off = off[:3] + ":" + off[3:] if len(off) == 5 else "+00:00"
        return t.strftime("%Y-%m-%d %H:%M:%S ") + off

    def since(self, ts: Optional[float]) -> str:
        """`2026-11-30 22:16:40 +08:00 (3m ago)`, or `unknown`."""
        if not ts:
            return "unknown"
        return f"{self.stamp(ts)} ({ago(self._now() - ts)})"

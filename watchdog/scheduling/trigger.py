"""APScheduler's interval trigger, kept on its grid (see PhasedTrigger)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Optional

from apscheduler.triggers.interval import IntervalTrigger


class PhasedTrigger(IntervalTrigger):
    """An interval trigger whose runs stay on its grid (start_date + k * interval) after a run
    off the grid. Why: a probe's first round runs at once (start, reload), and APScheduler's own
    trigger counts the next run from that one, which dropped the daemon's random offset (every
    node started together probed in lock-step). Always after the previous run, so APScheduler's
    catch-up loop ends."""

    def get_next_fire_time(self, previous_fire_time: Optional[datetime], now: datetime) -> Optional[datetime]:
        if previous_fire_time is None:
            return super().get_next_fire_time(previous_fire_time, now)
        base, length = self.start_date.timestamp(), self.interval_length
        # The grid's first run more than half an interval after the previous one: a run on the
        # grid is followed by the next one, a run off it (at once) by one 0.5 to 1.5 intervals on.
        after = previous_fire_time + timedelta(seconds=length / 2)
        steps = math.floor((after.timestamp() - base) / length) + 1
        nxt = datetime.fromtimestamp(base + steps * length, tz=self.timezone)
        while nxt <= after:  # rounding (floats, microseconds)
            steps += 1
            nxt = datetime.fromtimestamp(base + steps * length, tz=self.timezone)
        return nxt

"""Is the fp16 loss scale collapsing? One judgement of the scale's trend for logs and heartbeats.

Why a trend and not a count of overflow lines: dynamic loss scaling halves the scale on every
overflow, so a handful of halvings at the start of a run (calibration from 2^16 or 2^32) or now
and then later is healthy, while a scale that keeps falling to a few units, or below 1, means
the gradients overflow on every step and the updates are being skipped or are meaningless. What
tells them apart is where the scale ends and how far it fell, not how many lines said so:
DeepSpeed going 64 -> 2 in five lines is a collapse, 2^32 -> 2^26 in six lines is calibration.

A scale has collapsed when
- it is below `floor` (1 by default: apex's 1e-51, Megatron's `loss scale: 0.5`), however it
  got there, or at `floor` after falling to it (DeepSpeed `reducing to 1`); a scale that stays
  at 1 is a static one (bf16, or a MindFormers cell without loss scaling), not a collapse; or
- it fell by at least `fall` (2^5 = 32x) from the highest value seen within the window, and it
  is now at or below `below` (128), the bottom of fp16's usual operating range.

`ScaleTrack` keeps the window maximum with a monotonic queue: O(1) amortized per value, memory
bounded by the number of values that could still be a maximum, never by the history.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Deque, Optional, Tuple

#: Values remembered when no clock is known (a log without timestamps): the "window" is then
#: the last this-many values.
UNTIMED_VALUES = 256


@dataclass(frozen=True)
class ScaleTrend:
    """Thresholds of the judgement (see the module docstring)."""

    fall: float = 32.0
    below: float = 128.0
    floor: float = 1.0
    window: float = 600.0


class ScaleTrack:
    """The recent loss-scale values of one stream (a rank's heartbeat, a rule in one log)."""

    __slots__ = ("_max", "_seq")

    def __init__(self) -> None:
        #: (time or sequence number, value), values strictly decreasing from the left.
        self._max: Deque[Tuple[float, float]] = deque()
        self._seq = 0

    def add(self, t: Optional[float], value: float, window: float) -> float:
        """Record `value` at time `t` (None: no clock, count values instead); return the highest
        value within the window, `value` included."""
        self._seq += 1
        key = float(self._seq) if t is None else t
        if not math.isfinite(value):  # never a maximum; the judgement reads it directly
            return self._max[0][1] if self._max else value
        span = float(UNTIMED_VALUES) if t is None else window
        q = self._max
        if t is not None and q and q[-1][0] > key + span:
            # The clock went back by more than a window: these lines are another run's (logs of two
            # runs in one file, a report pasting one run under another); a later run's peak is not
            # this one's.
            q.clear()
        while q and q[-1][1] <= value:
            q.pop()
        q.append((key, value))
        while q and q[0][0] < key - span:
            q.popleft()
        return q[0][1]

    def peak(self, since: float) -> Optional[float]:
        """Highest value recorded at or after `since` (timed values only)."""
        while self._max and self._max[0][0] < since:
            self._max.popleft()
        return self._max[0][1] if self._max else None


def collapsed(trend: ScaleTrend, value: float, peak: Optional[float], overflow: bool = False) -> bool:
    """The judgement itself, pure: `value` now, `peak` the window's highest value; `overflow`:
    the value comes with an overflow (a skipped step, a reduction), so at the floor it is a
    collapse however long it has been there (DeepSpeed skipping every step at scale 1)."""
    if value != value:  # a NaN scale: nothing is left to scale
        return True
    if math.isinf(value):
        return False
    if value < trend.floor:
        return True
    if peak is None or not math.isfinite(peak):
        return overflow and value == trend.floor
    if value == trend.floor:  # fell to it; a scale that stays at 1 without overflows is static
        return overflow or peak > value
    return value <= trend.below and peak >= value * trend.fall


def parse_scale(text: Optional[str]) -> Optional[float]:
    """A printed scale (`65536`, `32768.0`, `1.4e-45`, `NAN`) as a float, or None."""
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None

"""Building blocks of the incremental summaries: each point costs O(1) amortized to add, and a
question about the current run or window costs O(1) or O(log n), never a walk over the history.

Why not recompute from the history on every pass: a detector pass runs every few seconds and
after every probe round, so a walk over an hour of samples per rank or per chip grows the
daemon's CPU with the history length (ranks x history per pass for the per-rank series).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque
from typing import Any, Deque, Generic, Iterator, List, Optional, Tuple, TypeVar

T = TypeVar("T")

#: Below this many dropped entries a list keeps its dead prefix (compaction is a copy).
_COMPACT_AT = 64


class Run:
    """Start time of the trailing unbroken run of points for which a condition held."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since: Optional[float] = None

    def push(self, t: float, ok: bool) -> None:
        if not ok:
            self.since = None
        elif self.since is None:
            self.since = t


class Window(Generic[T]):
    """Time-ordered points of a sliding window with stable sequence numbers.

    A list plus a head offset: appending and dropping from the front are O(1) amortized, the
    points stay contiguous so a time can be found by bisection. `seq` numbers every point ever
    appended, so a cache can tell whether the window changed (`key`).
    """

    __slots__ = ("times", "values", "head", "base")

    def __init__(self) -> None:
        self.times: List[float] = []
        self.values: List[T] = []
        self.head = 0   # index of the first live point
        self.base = 0   # seq of times[0]

    def __len__(self) -> int:
        return len(self.times) - self.head

    @property
    def next_seq(self) -> int:
        return self.base + len(self.times)

    @property
    def first_seq(self) -> int:
        return self.base + self.head

    def key(self) -> Tuple[int, int]:
        """Changes whenever a point enters or leaves the window."""
        return self.first_seq, self.next_seq

    def append(self, t: float, value: T) -> int:
        self.times.append(t)
        self.values.append(value)
        return self.next_seq - 1

    def first(self) -> Tuple[float, T]:
        return self.times[self.head], self.values[self.head]

    def last(self) -> Tuple[float, T]:
        return self.times[-1], self.values[-1]

    def time_of(self, seq: int) -> Optional[float]:
        i = seq - self.base
        return self.times[i] if self.head <= i < len(self.times) else None

    def drop_before(self, start: float, keep_one_before: bool = False) -> List[T]:
        """Drop points older than `start` and return their values. With `keep_one_before`, the last
        point at or before `start` stays (a window judged "from start" needs the value there)."""
        dropped: List[T] = []
        n = len(self.times)
        if keep_one_before:
            while n - self.head >= 2 and self.times[self.head + 1] <= start:
                dropped.append(self.values[self.head])
                self.head += 1
        else:
            while self.head < n and self.times[self.head] < start:
                dropped.append(self.values[self.head])
                self.head += 1
        if self.head >= _COMPACT_AT and self.head * 2 >= n:
            del self.times[:self.head]
            del self.values[:self.head]
            self.base += self.head
            self.head = 0
        return dropped

    def index_at(self, t: float) -> int:
        """Offset (from the first live point) of the first point at or after `t`."""
        return bisect_left(self.times, t, self.head) - self.head

    def items(self, lo: int = 0, hi: Optional[int] = None) -> Iterator[Tuple[float, T]]:
        end = len(self.times) if hi is None else self.head + hi
        return zip(self.times[self.head + lo:end], self.values[self.head + lo:end])


class LastBeyond:
    """The most recent point whose value lies beyond a bound, for any bound asked later.

    A monotonic stack (the suffix maxima, or minima with `lower=True`): a point is popped by a
    later point at least as extreme, so it can never again be the answer. O(1) amortized per
    point, O(log n) per question.
    """

    __slots__ = ("_sign", "_keys", "_seqs", "_head")

    def __init__(self, lower: bool = False) -> None:
        self._sign = -1.0 if lower else 1.0
        self._keys: List[float] = []  # negated signed values: ascending from the bottom
        self._seqs: List[int] = []
        self._head = 0

    def push(self, seq: int, value: float) -> None:
        k = -self._sign * value
        while len(self._keys) > self._head and self._keys[-1] >= k:
            self._keys.pop()
            self._seqs.pop()
        self._keys.append(k)
        self._seqs.append(seq)

    def forget_before(self, seq: int) -> None:
        while self._head < len(self._seqs) and self._seqs[self._head] < seq:
            self._head += 1
        if self._head >= _COMPACT_AT and self._head * 2 >= len(self._seqs):
            del self._keys[:self._head]
            del self._seqs[:self._head]
            self._head = 0

    def last_beyond(self, bound: float, inclusive: bool = False) -> Optional[int]:
        """Seq of the newest point strictly above `bound` (below it for a lower stack); with
        `inclusive`, at the bound also counts."""
        find = bisect_right if inclusive else bisect_left
        n = find(self._keys, -self._sign * bound, self._head)
        return self._seqs[n - 1] if n > self._head else None


def latest(*seqs: Optional[int]) -> Optional[int]:
    """The newest of some sequence numbers (None when none is given)."""
    known = [s for s in seqs if s is not None]
    return max(known) if known else None


def run_start(times: "Window[Any]", break_seq: Optional[int]) -> Optional[float]:
    """Start of the run that follows the newest break: the point after it, or the oldest
    retained point when no break is retained. None when the newest point is itself a break."""
    if len(times) == 0:
        return None
    if break_seq is None or break_seq < times.first_seq:
        return times.first()[0]
    if break_seq >= times.next_seq - 1:
        return None
    return times.time_of(break_seq + 1)


class SplitMedian:
    """A window of values split at a moving time: the median of the older part (the baseline) and
    the largest value of the newer part, kept as points arrive, cross the split and leave.

    The baseline is a sorted list (a point enters or leaves by bisection), the newer part a
    monotonic queue for its maximum, so each point costs O(log n) plus a short memmove, where
    sorting the baseline whenever a point arrived cost O(n log n) per rank and per sample.
    """

    __slots__ = ("points", "_base", "_split", "_maxq")

    def __init__(self) -> None:
        self.points: Window[float] = Window()
        self._base: List[float] = []      # values of seqs [points.first_seq, _split), sorted
        self._split = 0                    # seq of the first point of the newer part
        self._maxq: Deque[Tuple[int, float]] = deque()  # (seq, value), values decreasing

    def append(self, t: float, value: float) -> None:
        seq = self.points.append(t, value)
        while self._maxq and self._maxq[-1][1] <= value:
            self._maxq.pop()
        self._maxq.append((seq, value))

    def drop_before(self, start: float) -> None:
        first = self.points.first_seq
        for k, value in enumerate(self.points.drop_before(start)):
            if first + k < self._split:
                del self._base[bisect_left(self._base, value)]
        self._split = max(self._split, self.points.first_seq)
        self._trim()

    def split_at(self, t: float) -> None:
        """Points before `t` belong to the baseline (t only moves forward in the daemon; a
        step back rebuilds both parts)."""
        w = self.points
        target = w.first_seq + w.index_at(t)
        if target < self._split:
            self._base = sorted(w.values[w.head:target - w.base])
            self._maxq.clear()
            for i in range(target - w.base, len(w.values)):
                value = w.values[i]
                while self._maxq and self._maxq[-1][1] <= value:
                    self._maxq.pop()
                self._maxq.append((w.base + i, value))
            self._split = target
            return
        while self._split < target:
            insort(self._base, w.values[self._split - w.base])
            self._split += 1
        self._trim()

    def _trim(self) -> None:
        while self._maxq and self._maxq[0][0] < self._split:
            self._maxq.popleft()

    def baseline(self) -> Tuple[int, Optional[float], Optional[float]]:
        """(points in the baseline, its time span, its median); span and median None when empty."""
        n = len(self._base)
        if n == 0:
            return 0, None, None
        w = self.points
        span = w.time_of(self._split - 1) - w.first()[0]  # type: ignore[operator]
        mid = n // 2
        median = self._base[mid] if n % 2 else (self._base[mid - 1] + self._base[mid]) / 2
        return n, span, median

    def recent_max(self) -> Optional[float]:
        """The largest value of the newer part (None when it is empty)."""
        return self._maxq[0][1] if self._maxq else None

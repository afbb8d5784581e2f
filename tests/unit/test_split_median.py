"""SplitMedian (the throughput baseline) gives what sorting the window afresh gives.

Random series with ties, gaps, out-of-window drops and a split that moves forward (and once
back); each answer is checked against statistics.median / max over the same points.
"""

from __future__ import annotations

import random
import statistics

import pytest

from watchdog.summaries.window import SplitMedian


def brute(points, now, dropped_before, sustained):
    live = [(t, v) for t, v in points if t >= dropped_before]  # a dropped point stays dropped
    base = [v for t, v in live if t < now - sustained]
    recent = [v for t, v in live if t >= now - sustained]
    span = (live[len(base) - 1][0] - live[0][0]) if base else None
    return len(base), span, (statistics.median(base) if base else None), (max(recent) if recent else None)


@pytest.mark.parametrize("seed", range(8))
def test_split_median_matches_a_fresh_sort(seed):
    rnd = random.Random(seed)
    window, sustained = 300.0, 40.0
    sm, points, t, dropped_before = SplitMedian(), [], 0.0, float("-inf")
    for step in range(600):
        t += rnd.choice((1.0, 2.5, 10.0, 0.0))
        value = float(rnd.randint(0, 20))  # many ties
        points.append((t, value))
        sm.append(t, value)
        now = t + rnd.choice((0.0, 0.5, 3.0))
        if step == 300:
            now -= 30.0  # a view older than the last one: rebuilt, same answers
        sm.drop_before(now - window)
        dropped_before = max(dropped_before, now - window)
        sm.split_at(now - sustained)
        n, span, median, recent = sm.baseline() + (sm.recent_max(),)
        assert (n, span, median, recent) == brute(points, now, dropped_before, sustained), step

"""The check shared by the blind sets' tests (tests/unit/test_blind2_set.py, test_blind3_set.py):
a set scored once is held at its "after" numbers as a floor (failure lines reported) and a
ceiling (unexpected alarms, alarms on near-miss lines), so a later change may only do better on
data it was not fitted to."""

from __future__ import annotations

from typing import Dict, List

from tests.helpers import TESTS
from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset


def samples(folder: str) -> List[corpus.Sample]:
    return corpus.load(sorted((TESTS / "samples" / folder).glob("*.log")))


def near_miss_alarms(folder: str) -> int:
    """Near-miss lines (and nothing else expected) on which any rule fires."""
    rules = build_ruleset()
    category = {r.id: r.category for r in rules}
    count = 0
    for s in samples(folder):
        got = corpus.run(s, rules)
        for no, e in s.expect.items():
            if e.near and not (e.rules or e.missed) and {category.get(r, "custom") for r in got.get(no, set())}:
                count += 1
    return count


def assert_no_ground_lost(folder: str, after: Dict[str, int]) -> None:
    rep = corpus.score(samples(folder), build_ruleset())
    reported = sum(s.tp for s in rep.scores.values())
    assert reported >= after["reported"], (reported, rep.failure_lines)
    assert rep.false_alarms <= after["unexpected"], rep.false_alarms
    alarms = near_miss_alarms(folder)
    assert alarms <= after["near_miss_alarms"], alarms

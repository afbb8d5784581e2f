"""The check shared by the blind sets' tests (tests/unit/test_blind_sets.py):
a set scored once is held at its "after" numbers as a floor (failure lines reported) and a
ceiling (unexpected alarms, alarms on near-miss lines), so a later change may only do better on
data it was not fitted to."""

from __future__ import annotations

from typing import Dict, List, Sequence

from tests.helpers import TESTS
from watchdog.logrules import corpus
from watchdog.logrules.model import Rule, build_ruleset


def samples(folder: str) -> List[corpus.Sample]:
    return corpus.load(sorted((TESTS / "samples" / folder).glob("*.log")))


def near_miss_alarms(sets: List[corpus.Sample], rules: Sequence[Rule]) -> int:
    """Near-miss lines (and nothing else expected) on which any rule fires."""
    category = {r.id: r.category for r in rules}
    count = 0
    for s in sets:
        got = corpus.run(s, rules)
        for no, e in s.expect.items():
            if e.near and not (e.rules or e.missed) and {category.get(r, "custom") for r in got.get(no, set())}:
                count += 1
    return count


def assert_no_ground_lost(folder: str, after: Dict[str, int]) -> None:
    rules, sets = build_ruleset(), samples(folder)
    rep = corpus.score(sets, rules)
    reported = sum(s.tp for s in rep.scores.values())
    assert reported >= after["reported"], (reported, rep.failure_lines)
    assert rep.false_alarms <= after["unexpected"], rep.false_alarms
    alarms = near_miss_alarms(sets, rules)
    assert alarms <= after["near_miss_alarms"], alarms

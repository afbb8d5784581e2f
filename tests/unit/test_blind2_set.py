"""The second blind set (tests/samples/blind2): public failure reports gathered after the fourth
round's rule work and never tuned to, scored once with the rules before that round (91 of 152
failure lines, 59.9 %) and once with the rules after it (98 of 152, 64.5 %; 59 lines with an
unexpected alarm, 16 of the 125 near-miss lines among them). This test holds the "after" numbers
as a floor and a ceiling: a later change may only do better on data it was not fitted to.
docs/log-signatures.md reports both."""

from __future__ import annotations

from typing import List

from tests.helpers import TESTS
from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset

BEFORE_ROUND = {"failure_lines": 152, "reported": 91, "unexpected": 53}
AFTER_ROUND = {"failure_lines": 152, "reported": 98, "near_lines": 125, "unexpected": 59, "near_miss_alarms": 16}


def _samples() -> List[corpus.Sample]:
    return corpus.load(sorted((TESTS / "samples" / "blind2").glob("*.log")))


def test_the_second_blind_set_is_the_one_scored():
    rep = corpus.score(_samples(), build_ruleset())
    assert rep.failure_lines == AFTER_ROUND["failure_lines"] and rep.near_lines == AFTER_ROUND["near_lines"]
    assert rep.near_lines >= 100


def test_no_later_change_loses_ground_on_the_second_blind_set():
    rules, samples = build_ruleset(), _samples()
    rep = corpus.score(samples, rules)
    reported = sum(s.tp for s in rep.scores.values())
    assert reported >= AFTER_ROUND["reported"], (reported, rep.failure_lines)
    assert rep.false_alarms <= AFTER_ROUND["unexpected"], rep.false_alarms
    category = {r.id: r.category for r in rules}
    near_alarms = 0
    for s in samples:
        got = corpus.run(s, rules)
        for no, e in s.expect.items():
            if e.near and not (e.rules or e.missed) and {category.get(r, "custom") for r in got.get(no, set())}:
                near_alarms += 1
    assert near_alarms <= AFTER_ROUND["near_miss_alarms"], near_alarms

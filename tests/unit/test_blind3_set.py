"""The third blind set (tests/samples/blind3): public failure reports gathered at the end of the
fifth round's rule work, by people who saw only rule ids, categories and one-line meanings, and
never tuned to. Scored once with the rules of the round's start (79 of 139 failure lines, 56.8 %;
79 lines with an unexpected alarm) and once with the rules after the round's work (97 of 139,
69.8 %; 102 lines with an unexpected alarm, 1 of the 109 near-miss lines among them: NCCL's
harmless `WARN Failed to open libibverbs.so[.1]`, no longer an alarm since). This test holds the
"after" numbers, with that fix, as a floor and a ceiling: a later change may only do better on
data it was not fitted to. docs/log-signatures.md reports both."""

from __future__ import annotations

from typing import List

from tests.helpers import TESTS
from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset

BEFORE_ROUND = {"failure_lines": 139, "reported": 79, "unexpected": 79}
#: As scored: 102 unexpected, 1 near-miss alarm; the libibverbs warning fixed after it: 101 and 0.
AFTER_ROUND = {"failure_lines": 139, "reported": 97, "near_lines": 109, "unexpected": 101, "near_miss_alarms": 0}


def _samples() -> List[corpus.Sample]:
    return corpus.load(sorted((TESTS / "samples" / "blind3").glob("*.log")))


def test_the_third_blind_set_is_the_one_scored():
    rep = corpus.score(_samples(), build_ruleset())
    assert rep.failure_lines == AFTER_ROUND["failure_lines"] and rep.near_lines == AFTER_ROUND["near_lines"]
    assert rep.failure_lines >= 60 and rep.near_lines >= 100


def test_no_later_change_loses_ground_on_the_third_blind_set():
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

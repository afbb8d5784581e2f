"""The second blind set (tests/samples/blind2): public failure reports gathered after the fourth
round's rule work and never tuned to, scored once with the rules before that round (91 of 152
failure lines, 59.9 %) and once with the rules after it (98 of 152, 64.5 %; 59 lines with an
unexpected alarm, 16 of the 125 near-miss lines among them). This test holds the "after" numbers
as a floor and a ceiling: a later change may only do better on data it was not fitted to.
docs/log-signatures.md reports both."""

from __future__ import annotations

from tests.blind_kit import assert_no_ground_lost, samples
from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset

BEFORE_ROUND = {"failure_lines": 152, "reported": 91, "unexpected": 53}
AFTER_ROUND = {"failure_lines": 152, "reported": 98, "near_lines": 125, "unexpected": 59, "near_miss_alarms": 16}
#: After the sixth round's wording work (bf1859d, then the fourth set's misses): 101 reported, and 2
#: more unexpected alarms, each a repeat of a failure line its block reports (torch_npu's `Some HCCL
#: operations have failed or timed out`, `ncclUnhandledCudaError` after NCCL's own report).
AFTER_WORDINGS = {**AFTER_ROUND, "reported": 101, "unexpected": 61}


def test_the_second_blind_set_is_the_one_scored():
    rep = corpus.score(samples("blind2"), build_ruleset())
    assert rep.failure_lines == AFTER_ROUND["failure_lines"] and rep.near_lines == AFTER_ROUND["near_lines"]
    assert rep.near_lines >= 100


def test_no_later_change_loses_ground_on_the_second_blind_set():
    assert_no_ground_lost("blind2", AFTER_WORDINGS)

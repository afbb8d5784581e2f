"""The third blind set (tests/samples/blind3): public failure reports gathered at the end of the
fifth round's rule work, by people who saw only rule ids, categories and one-line meanings, and
never tuned to. Scored once with the rules of the round's start (79 of 139 failure lines, 56.8 %;
79 lines with an unexpected alarm) and once with the rules after the round's work (97 of 139,
69.8 %; 102 lines with an unexpected alarm, 1 of the 109 near-miss lines among them: NCCL's
harmless `WARN Failed to open libibverbs.so[.1]`, no longer an alarm since). This test holds the
"after" numbers, with that fix, as a floor and a ceiling: a later change may only do better on
data it was not fitted to. docs/log-signatures.md reports both."""

from __future__ import annotations

from tests.blind_kit import assert_no_ground_lost, samples
from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset

BEFORE_ROUND = {"failure_lines": 139, "reported": 79, "unexpected": 79}
#: As scored: 102 unexpected, 1 near-miss alarm; the libibverbs warning fixed after it: 101 and 0.
AFTER_ROUND = {"failure_lines": 139, "reported": 97, "near_lines": 109, "unexpected": 101, "near_miss_alarms": 0}
#: After the sixth round's wording work, which read this set's misses (so it is no longer blind;
#: the fourth set, tests/samples/blind4, measures that work): 119 reported; 7 more unexpected
#: alarms, each a repeat of a failure line its block already reports (the gatherers marked the
#: repeats as context: NCCL's `Some NCCL operations have failed or timed out` on every rank, a
#: second `Cuda failure 700`, XLA's `OP_REQUIRES failed ... RESOURCE_EXHAUSTED`); after the fourth
#: set's misses, 4 more of the same kind (torch elastic's `exitcode  : 1 (pid: N)` table row under
#: its `failed (exitcode: 1)` line, a second `HCCL watchdog thread terminated with exception:`).
#: An attack pass then took back wordings that also appear where nothing failed (anomaly mode's
#: `Error detected in XBackward` precedes any backward error, not only a NaN; vLLM prints `Engine core
#: proc ... died unexpectedly` at a normal end too): 117 reported, 111 unexpected.
AFTER_WORDINGS = {**AFTER_ROUND, "reported": 117, "unexpected": 111}


def test_the_third_blind_set_is_the_one_scored():
    rep = corpus.score(samples("blind3"), build_ruleset())
    assert rep.failure_lines == AFTER_ROUND["failure_lines"] and rep.near_lines == AFTER_ROUND["near_lines"]
    assert rep.failure_lines >= 60 and rep.near_lines >= 100


def test_no_later_change_loses_ground_on_the_third_blind_set():
    assert_no_ground_lost("blind3", AFTER_WORDINGS)

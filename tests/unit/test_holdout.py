"""The third round's held-out set (tests/samples/holdout, gathered before its rules were written):
the shipped rules keep reporting at least 90 % of its failure lines with no alarm on its silent
lines. The numbers before and after are in docs/log-signatures.md."""

from __future__ import annotations

from tests.helpers import TESTS
from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset


def test_the_held_out_set_scores_at_least_90_percent_with_no_false_alarm():
    rep = corpus.score(corpus.load(sorted((TESTS / "samples" / "holdout").glob("*.log"))), build_ruleset())
    reported = sum(s.tp for s in rep.scores.values())
    assert rep.failure_lines >= 100 and rep.silent_lines >= 100
    assert reported / rep.failure_lines >= 0.90, (reported, rep.failure_lines)
    # 114 of 116 until the generic vocabulary rules (`*_generic`): an MPI launcher's tagged `[0]<stderr>:RuntimeError:
    # check_rank and exit ...`, an exception's last line without its frames, is the 115th. 114 again since the
    # ninth round: the c10d store's Windows warning `(system error: 10049 - ...)` is silent (three public sets mark
    # it a run that went on; this set marks it a failure).
    assert reported >= 114, (reported, rep.failure_lines)
    assert rep.false_alarms == 0 and all(s.near_alarms == 0 for s in rep.scores.values())

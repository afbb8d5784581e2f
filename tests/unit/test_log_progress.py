"""Progress lines for the stall rule: iteration reports count, failure lines never do."""

from __future__ import annotations

from watchdog.config.sections.logs import LogsProbeConfig
from watchdog.logrules.matcher import Matcher
from watchdog.logrules.progress import ProgressMatcher
from tests.helpers import REPO

SAMPLES = REPO / "tests" / "samples" / "logs"


def _failure():
    m = Matcher(LogsProbeConfig().ruleset())
    return lambda text: bool(m.match_text(text))


def _marked_lines():
    """(text, expected rule or '-') of every marked Megatron iteration line in the shipped samples."""
    out = []
    for f in sorted(SAMPLES.glob("*.log")):
        for line in f.read_text(errors="replace").splitlines():
            if "##>" in line and "iteration" in line and "/" in line.split("|", 1)[0]:
                text, mark = line.rsplit("##>", 1)
                out.append((text.rstrip(), mark.strip()))
    return out


def test_clean_iteration_lines_are_progress_and_failure_lines_are_not():
    pm, failure = ProgressMatcher(), _failure()
    lines = _marked_lines()
    clean = [t for t, mark in lines if mark == "-"]
    failing = [t for t, mark in lines if mark != "-"]
    assert clean and failing, lines
    for t in clean:
        # A near miss that counts towards a repetition rule (a skipped iteration) is conservatively
        # not progress: one such line among many changes nothing, and a run of them is a finding.
        assert pm.found((t + "\n").encode(), failure) or failure(t), t
    for t in failing:  # e.g. `lm loss: nan` in the iteration line itself
        assert not pm.found((t + "\n").encode(), failure), t


def test_a_nan_or_error_line_during_a_hang_is_not_progress():
    pm, failure = ProgressMatcher(), _failure()
    block = (b"[rank 3] WARNING: loss is nan at iteration 812, grad norm nan; skipping update\n"
             b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"
             b"saving checkpoint at iteration 800 to /ckpt/iter_0000800\n")
    assert not pm.found(block, failure)


def test_each_trainer_family_and_configured_patterns():
    pm, failure = ProgressMatcher(), _failure()
    for line in (" iteration      120/  100000 | consumed samples: 3840 | lm loss: 2.31E+00 |",
                 "{'loss': 1.2345, 'grad_norm': 0.87, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
                 "[Rank 0] step=120, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]",
                 "steps: 120 loss: 1.2345 iter time (s): 0.512 samples/sec: 62.5",
                 "epoch: 1 step: 120, loss is 1.2345"):
        assert pm.found(line.encode() + b"\n", failure), line
    mine = ProgressMatcher([r"^TRAIN \d+ done$"])
    assert mine.found(b"noise\nTRAIN 7 done\n", failure) and not mine.found(b"iteration 1/2 |\n", failure)
    assert not ProgressMatcher([]).found(b" iteration 1/ 2 |\n", failure)


def test_long_hostile_line_is_linear():
    """A megabyte of near-matches is handled in one pass (bounded repeats, no backtracking blow-up)."""
    pm = ProgressMatcher()
    block = (b"iteration " + b" " * 19 + b"1" * 11 + b"/" + b" " * 19) * 20000 + b"\n"
    assert pm.found(block, lambda t: False) is False

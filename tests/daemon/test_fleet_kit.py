"""The simulated fleet's ranks write what the daemon reads as a healthy job until told otherwise.

Why this is tested on its own: the fleet e2e counts pages. If a simulated rank's step line is not a
progress line the daemon recognises, every node's stall rule sees a job without progress and calls
`stall` once `stall.duration` has passed since its daemon started, whatever scenario is running
then: an incident that never resolves, or a second page after one that did (the flaky peer-loss
scenario). The rank script runs for real here and its lines go through the log probe's own
progress and failure matchers.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import List

from tests.fleet_kit import RANK_SCRIPT
from tests.helpers import wait_for
from watchdog.config.sections.logs import LogsProbeConfig
from watchdog.logrules.matcher import Matcher
from watchdog.logrules.progress import ProgressMatcher


def _rank(log: Path, rank: int) -> subprocess.Popen:
    return subprocess.Popen(["/bin/sh", "-c", RANK_SCRIPT, "rank", str(log), str(rank)], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _lines(log: Path) -> List[str]:
    return log.read_text().splitlines() if log.exists() else []


def _rules(text: str) -> List[str]:
    return sorted({r.category for r in Matcher(LogsProbeConfig().ruleset()).match_text(text)})


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def test_a_simulated_rank_makes_progress_the_stall_rule_sees_and_its_faults_are_not_progress(tmp_path):
    m = Matcher(LogsProbeConfig().ruleset())
    failure = lambda text: bool(m.match_text(text))  # noqa: E731 (as the log probe calls it)
    pm = ProgressMatcher()
    log = tmp_path / "train_rank_3.log"
    p = _rank(log, 3)
    try:
        wait_for(lambda: len(_lines(log)) >= 1, timeout=30, what="the first step line")
        step = _lines(log)[0]
        assert pm.found((step + "\n").encode(), failure), f"not a progress line for the stall rule: {step!r}"
        assert not failure(step), step

        p.send_signal(signal.SIGUSR2)  # the collective times out; the rank goes on
        # A signal that lands between the step line and the shell's `wait` runs its trap at once,
        # but the next step line comes only when that `sleep 30` ends: up to 30 s later.
        wait_for(lambda: len(_lines(log)) >= 3, timeout=75, what="the HCCL line and the next step")
        hccl, after = _lines(log)[1:3]
        assert _rules(hccl) and all(r == "hccl" for r in _rules(hccl)), (hccl, _rules(hccl))
        assert not pm.found((hccl + "\n").encode(), failure), hccl
        assert pm.found((after + "\n").encode(), failure), after

        p.send_signal(signal.SIGUSR1)  # out of memory: the OOM line, then the rank dies
        assert p.wait(timeout=30) == 1
        oom = _lines(log)[-1]
        assert any(r == "oom" for r in _rules(oom)), (oom, _rules(oom))
        assert not pm.found((oom + "\n").encode(), failure), oom
    finally:
        _kill(p)

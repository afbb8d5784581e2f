"""A NaN line a rank prints through a progress bar pages, on the shipped example config.

tqdm redraws its bar with a carriage return and no newline; `tqdm.write`, which trainers print
their logs through while a bar runs, clears it (`\\r`, spaces, `\\r`) and writes the line and a
newline (the bytes of tqdm 4.70.1: tests/unit/test_log_progress_bars.py). In the rank's log file
all of it is one "line" since the last newline: here 150 KiB of redraws before the NaN line, of
which matching saw only the first 64 KiB before, so the NaN never paged."""

from __future__ import annotations

import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode

pytestmark = pytest.mark.slow

NAN = "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}"
BAR = "".join(f"\r 37%|###7      | {i}/10000 [12:01<20:22, 5.14it/s]" for i in range(3000))


def test_a_nan_line_after_a_long_progress_bar_pages_once(tmp_path):
    node = ShippedNode(tmp_path)
    try:
        node.wait_up()
        with node.job("bar-job", ranks=2) as job:
            node.follow(job, "bar-job")
            node.start_row()
            words = BAR + "\r" + " " * 52 + "\r" + NAN + "\n"
            assert len(words) > 2 * 65536
            tmp = job.ctl / "words.tmp"
            tmp.write_text(words, newline="")
            tmp.rename(job.ctl / "words-0")
            wait_for(lambda: node.counts()["hook"]["firing"] >= 1, timeout=90, what="the NaN's page")
            time.sleep(10)  # anything else would come with the same or the next flush
            assert node.counts() == {"feishu": 1, "hook": {"firing": 1, "resolved": 0}}, node.messages()
            assert [(a["alertname"], a["training_job"], a.get("rank")) for a in node.hook_alerts()] \
                == [("log_nan", "bar-job", "0")]
            (finding,) = node.findings("bar-job", "log_nan")
            assert finding["details"]["first_line"] == NAN
    finally:
        node.stop()

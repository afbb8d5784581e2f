"""Descriptors are budgeted by what is watched: a plog folder of 10,000 files (the README's own
glob) under a daemon limited to 1024 open files (soft and hard, as `prlimit` sets them).

Before, each followed file kept its descriptor: the limit ran out, the alert store could not
open (alerts held), /healthz went unanswered, and the fault in one plog was paged late. Now the
log files beyond the budget are read by polling (opened, read, closed each round), counted in
`npu_watchdog_log_files_polled` and said once in the log; the store, the HTTP server and the
page keep working. Real files, the real daemon under a real limit, a real webhook receiver.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import TESTS, http_get, wait_for

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")]

FILES = 10_000
LIMIT = 1024


def corpus_line(name: str, needle: str) -> str:
    for line in (TESTS / "samples" / "corpus" / name).read_text(encoding="utf-8").splitlines():
        if needle in line:
            return line.rsplit("  ##> ", 1)[0]
    raise AssertionError(f"{needle!r} not in {name}")


class HealthWatch(threading.Thread):
    """Asks /healthz every half second while the test runs; keeps every failure (no answer within
    10 s, or an answer other than healthy or still starting)."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.failures, self.answers = url, [], 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                code, body = http_get(self.url + "/healthz", timeout=10)
            except OSError as exc:
                self.failures.append(repr(exc))
                continue
            self.answers += 1
            if code != 200 and not body.startswith("starting:"):  # the first round may still run
                self.failures.append((code, body[:200]))


def test_ten_thousand_plogs_under_1024_descriptors_page_the_fault_and_keep_health(make_daemon, tmp_path: Path):
    plogs = tmp_path / "plog"
    plogs.mkdir()
    for i in range(FILES):
        (plogs / f"plog-{100000 + i}_20250806230935838.log").write_text(
            f"[INFO] RUNTIME(1{i}):2025-08-06-23:09:35.838.000 [runtime.cc:1] process {i} started\n")
    with Receiver("webhook") as rx:
        d = make_daemon({
            "probes": {"logs": {"enabled": True, "interval": "1s", "rescan": "2s", "hold": "1h",
                                "sources": [{"name": "plog", "kind": "plog", "paths": [str(plogs / "plog-*.log")]}]}},
            "alerting": {"group_window": "1s", "retry_initial": "300ms", "retry_max": "1s",
                         "channels": [{"type": "webhook", "name": "hook", "url": rx.url}]},
            "snapshots": {"enabled": False},
        }, wrapper=("prlimit", f"--nofile={LIMIT}:{LIMIT}", "--"))
        health = HealthWatch(d.url)
        health.start()
        try:
            wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="plog"}') == FILES,
                     timeout=180, what="every plog followed")
            line = corpus_line("cann_plog.log", "Task run failed, device_id=3")
            with open(plogs / f"plog-{100000 + 7777}_20250806230935838.log", "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
            wait_for(lambda: [a for r in rx.accepted() for a in r.json["alerts"]
                              if a["labels"]["alertname"] == "log_device"],
                     timeout=120, what="the plog fault paged")
            time.sleep(3)
            firing = [r for r in rx.accepted() if r.json["status"] == "firing"]
            sent = [a["labels"]["alertname"] for r in firing for a in r.json["alerts"]]
            assert sent.count("log_device") == 1, sent
            assert "state_unwritable" not in sent and "probe_down" not in sent, sent
            m = d.metrics()
            polled = m.get('npu_watchdog_log_files_polled{source="plog"}', 0)
            assert 0 < polled < FILES, polled
            log = d.log()
            assert log.count("read by polling") == 1, log[-3000:]
            assert "Too many open files" not in log and "Traceback" not in log, log[-3000:]
            assert "KeyError" not in log, log[-3000:]
        finally:
            health.stop.set()
            health.join(timeout=15)
        assert health.answers > 0 and health.failures == [], health.failures[:5]

"""Scans of the process table run in several probes' threads at once; under load a scan that
began first can end last. It read an older table: it must not replace a newer scan's result, and
a job that only a later-begun scan found is not "gone before" the earlier one's round.

Found in a full test run under the start's load: the process probe's own scan (begun before a
job's rank started, ended after another probe's scan had found the rank) made the job look like
one that "started and ended between two rounds" (`DiscoveredProcessProbe._track_missed`), and a
`job_gone` page ("0 ranks last seen") went out for a job whose rank was alive. A real job and
real scans; only the first scan is held after it has read the table, as a loaded machine does."""

from __future__ import annotations

import threading
import time
from typing import Dict

from tests.helpers import wait_for
from tests.jobkit import TAG, TrainJob
from watchdog.discovery import feed as feed_mod
from watchdog.discovery.feed import DiscoveryFeed, own_pids
from watchdog.discovery.model import Discovered
from watchdog.discovery.scan import ScanOptions


def test_a_scan_that_began_first_and_ended_last_neither_replaces_the_newer_nor_hides_a_job(tmp_path, monkeypatch):
    job = TrainJob(tmp_path / "j", ranks=1)
    feed = DiscoveryFeed(ScanOptions(ignore=own_pids(), only=((TAG, job.tag),)))
    read, release = threading.Event(), threading.Event()
    real = feed_mod.discover

    def held_first(*args, **kwargs):
        out = real(*args, **kwargs)
        if not read.is_set():  # the first scan: it has read the table; it ends when released
            read.set()
            release.wait(60)
        return out

    monkeypatch.setattr(feed_mod, "discover", held_first)
    results: Dict[str, Discovered] = {}
    first_began = time.monotonic()
    first = threading.Thread(target=lambda: results.setdefault("first", feed.refresh()), daemon=True)
    first.start()
    try:
        assert read.wait(60), "the first scan never read the table"
        with job:
            later = wait_for(lambda: (lambda f: f if f.jobs and f.jobs[0].ranks else None)(feed.refresh()),
                             timeout=60, what="a later scan finds the job's rank")
            release.set()
            first.join(60)
            assert not results["first"].jobs  # it read the table before the rank started
            latest = feed.latest()
            assert latest is not None and [j.name for j in latest.jobs] == [j.name for j in later.jobs], latest
            # Asked by the first scan's round: no job found by a scan that began after its own.
            assert feed.seen_since(first_began - 60, before=first_began + 1e-6) == ()
            assert [j.name for j in feed.seen_since(first_began - 60)] == [later.jobs[0].name]
    finally:
        release.set()

"""How many threads an idle daemon runs (docs/architecture.md#threads states each one and why).

Counted, not timed: the real daemon runs with discovery on as shipped, the kernel probe and one
channel, until every probe has done two rounds; its threads are read from /proc. Before one
thread settled every round, each round also held an APScheduler pool thread that only waited on
it (19-21 threads at idle)."""

from __future__ import annotations

import os
import uuid

from tests.helpers import free_port, wait_for


def test_an_idle_daemon_runs_fewer_than_19_threads(make_daemon):
    cfg = {
        "discovery": {"enabled": True, "only_env": f"NPU_WATCHDOG_TEST_MARK={uuid.uuid4().hex}"},
        "probes": {"kernel": {"enabled": True}},
        "alerting": {"channels": [{"type": "webhook", "name": "ops",
                                   "url": f"http://127.0.0.1:{free_port()}/hook"}]},
    }
    d = make_daemon(cfg)
    wait_for(lambda: d.status() and all(p["runs_total"] >= 2 for p in d.status()["probes"]),
             timeout=90, what="two rounds of every probe")
    probes = [p["name"] for p in d.status()["probes"]]
    # main, APScheduler (which runs its jobs itself: no pool thread), one worker per probe, the
    # round watch, the followers of the logs and kernel probes, the engine's timer, one sender,
    # the dead-man pinger, the HTTP server, the kernel's process-exit listener (where readable).
    bound = min(2 + len(probes) + 1 + 2 + 1 + 1 + 1 + 1 + 1, 17)
    seen = []

    def idle_count() -> bool:
        # A short-lived helper thread (a reload, a snapshot) may be caught in one reading: idle
        # means a reading within the bound, and a daemon that keeps more threads never gives one.
        seen.append(len(os.listdir(f"/proc/{d.proc.pid}/task")))
        return seen[-1] <= bound

    try:
        wait_for(idle_count, timeout=30, what=f"at most {bound} threads")
    except AssertionError:
        raise AssertionError(f"an idle daemon kept more than {bound} threads: read {seen[-10:]}; probes {probes}") from None

"""Shared pieces of the in-process alert engine tests: a config with one webhook channel, a finding
factory, a fake wall clock, the engine wired as the daemon wires it, and a driver that replays
detector passes on it."""

from __future__ import annotations

import time
from typing import Callable, List, Optional

import yaml

from watchdog.alerting.decide.core import SnapshotRequester
from watchdog.alerting.engine import AlertEngine
from watchdog.alerting.deliver.outbox import DeadMan, Outbox
from watchdog.alerting.deliver.store import AlertStore
from watchdog.config.load import load_config_text
from watchdog.core.findings import Finding

BASE = {"host": "node-a", "training_job": "job-a"}


def make_config(tmp_path, url, **alerting):
    al = {"group_window": "1s", "resolve_delay": "1s", "reminder": "0s",
          "channels": [{"type": "webhook", "name": "hook", "url": url, "min_severity": "info"}]}
    al.update(alerting)
    return load_config_text(yaml.safe_dump({"paths": {"state_dir": str(tmp_path / "state")}, "alerting": al}))


def f(rule: str, sev: str = "warning", **labels) -> Finding:
    return Finding(rule=rule, severity=sev, summary=f"{rule} {labels}", labels={**BASE, **labels},
                   hint="check it", value="1", since=time.time() - 60, evidence=("line one", "line two"))


class Clock:
    """A fake wall clock, shared by the engine and the driver."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def open_engine(cfg, clock: Optional[Callable[[], float]] = None, timer: bool = False,
                snapshots: Optional[SnapshotRequester] = None) -> AlertEngine:
    """The engine with its store, outbox and dead-man pinger, as the daemon builds them (see
    Daemon._build_engine); on a fake `clock` without the timer thread unless told otherwise."""
    store = AlertStore(cfg.paths.state_dir, quarantine_damaged=True)
    outbox = Outbox(store, cfg.alerting)
    engine = AlertEngine(cfg, store, outbox, DeadMan(cfg.alerting), snapshots,
                         clock=clock or time.time, timer=timer)
    outbox.start()
    return engine


class Driver:
    """Feeds the engine the same findings repeatedly, like detector passes every 0.2 s (fake time)."""

    def __init__(self, engine: AlertEngine):
        self.engine = engine

    def hold(self, findings: List[Finding], seconds: float, step: float = 0.2) -> None:
        for _ in range(max(1, round(seconds / step))):
            self.engine.process(findings)
            self.engine.tick()
            self.engine.clock.now += step


def settle(e: AlertEngine, timeout: float = 30.0) -> None:
    """Wait (real time, bounded) until every committed notification has been delivered."""
    deadline = time.monotonic() + timeout
    while e.outbox.stats()[0] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert e.outbox.stats()[0] == 0, "outbox did not drain"

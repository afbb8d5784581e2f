"""Probe rounds take turns at the interpreter (watchdog.host.turns): rounds started together run
one after the other, a round waiting for a command lets another run meanwhile, and a round stuck
while holding its turn keeps no other round from running."""

from __future__ import annotations

import threading
import time

import pytest

from tests.helpers import wait_for
from watchdog.host import turns
from watchdog.host.subproc import run_command
from watchdog.scheduling.rounds import Round, RoundWorker


class _Busy:
    """A probe whose round reads a few thousand small files (what the process probe does)."""

    def __init__(self, path):
        self.path = path
        self.spans = []
        self.held = None

    def collect(self):
        self.held = turns.holding()
        start = time.monotonic()
        for _ in range(3000):
            with open(self.path, "rb") as fh:
                fh.read()
        self.spans.append((start, time.monotonic()))
        return "ok"


@pytest.fixture
def patient(monkeypatch):
    """A turn waited for as long as it takes: which round runs when must not depend on how fast
    this machine is (on a loaded one a round of these reads can take longer than MAX_WAIT)."""
    monkeypatch.setattr(turns, "MAX_WAIT", 60.0)


def test_rounds_started_together_run_one_after_the_other(tmp_path, patient):
    f = tmp_path / "stat"
    f.write_bytes(b"x" * 200)
    probes = [_Busy(f) for _ in range(4)]
    workers = [RoundWorker(f"t{i}") for i in range(4)]
    for _ in range(5):
        rounds = [Round(p) for p in probes]
        for w, r in zip(workers, rounds):
            w.submit(r)
        for r in rounds:
            assert r.done.wait(30) and r.error is None, r.error
    spans = sorted(s for p in probes for s in p.spans)
    overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    assert not overlaps, overlaps
    assert all(p.held for p in probes)
    for w in workers:
        w.submit(None)


class _Waits:
    """A probe whose round runs a command that ends when the test says so."""

    def __init__(self, flag):
        self.flag = flag

    def collect(self):
        out = run_command(["sh", "-c", f'while [ ! -e "{self.flag}" ]; do sleep 0.02; done; echo done'], timeout=60)
        assert out.ok and out.stdout.strip() == "done", out
        return turns.holding()  # taken back after the command


def test_a_round_waiting_for_a_command_gives_its_turn_to_another(tmp_path, patient):
    flag = tmp_path / "go"
    f = tmp_path / "stat"
    f.write_bytes(b"x")
    waits, busy = Round(_Waits(flag)), Round(_Busy(f))
    a, b = RoundWorker("wait"), RoundWorker("busy")
    a.submit(waits)
    time.sleep(0.3)  # the command is running (either way the check below holds)
    b.submit(busy)
    try:
        assert busy.done.wait(30) and busy.error is None
        assert not waits.done.is_set(), "the command ended before the test let it"
        assert busy.probe.held, "the busy round ran without a turn: the waiting round kept it"
    finally:
        flag.touch()  # never leave the round (and a turn) behind for the next test
    assert waits.done.wait(30) and waits.error is None, waits.error
    assert waits.result is True
    a.submit(None)
    b.submit(None)


class _Stuck:
    """A probe whose round hangs in Python-visible work (a read on a dead mount) until released."""

    def __init__(self):
        self.release = threading.Event()
        self.entered = threading.Event()

    def collect(self):
        self.entered.set()
        self.release.wait(60)
        return "late"


def test_a_round_stuck_in_its_turn_keeps_no_other_round_from_running(tmp_path):
    f = tmp_path / "stat"
    f.write_bytes(b"x")
    stuck, busy = Round(_Stuck()), Round(_Busy(f))
    a, b = RoundWorker("stuck"), RoundWorker("busy")
    a.submit(stuck)
    assert stuck.probe.entered.wait(30)
    b.submit(busy)
    try:
        wait_for(busy.done.is_set, timeout=30, what="the other round, without a turn")
        assert busy.error is None and busy.probe.held is False
        assert not stuck.done.is_set()
    finally:
        stuck.probe.release.set()
    assert stuck.done.wait(30)
    a.submit(None)
    b.submit(None)
    # the turn is free again: a new round takes it
    again = Round(_Busy(f))
    c = RoundWorker("again")
    c.submit(again)
    assert again.done.wait(30) and again.probe.held is True
    c.submit(None)

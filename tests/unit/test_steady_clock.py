"""The daemon's step-free clock (watchdog.host.clock) on a fake wall and monotonic clock."""

from __future__ import annotations

import pytest

from watchdog.host import clock as clockmod
from watchdog.host.clock import SteadyClock, steady_stamp


class FakeTime:
    def __init__(self) -> None:
        self.mono, self.wall = 1000.0, 1_800_000_000.0

    def run(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds

    def step(self, seconds: float) -> None:
        self.wall += seconds


@pytest.fixture
def fake(monkeypatch) -> FakeTime:
    t = FakeTime()
    monkeypatch.setattr(clockmod.time, "monotonic", lambda: t.mono)
    monkeypatch.setattr(clockmod.time, "time", lambda: t.wall)
    return t


def test_a_step_moves_the_wall_clock_and_not_the_steady_one(fake) -> None:
    c = SteadyClock()
    start = c.now()
    assert start == fake.wall
    fake.run(10)
    fake.step(7200)
    assert c.now() == start + 10
    assert c.check() == 7200 and c.steps_total == 1
    assert c.check() == 0 and c.steps_total == 1, "one step is said once"
    assert c.to_wall(c.now()) == fake.wall
    assert c.from_wall(fake.wall) == c.now()
    fake.run(1)
    fake.step(0.5)  # a slew's worth between two looks is no step
    assert c.check() == 0 and c.steps_total == 1


def test_stamps_of_a_writer_survive_steps_both_ways(fake) -> None:
    c = SteadyClock()
    # A rank writes at t=0 and is read at t=1: its age is what the wall clock says.
    written = fake.wall
    fake.run(1)
    first = steady_stamp(written, None, None, None, c.now(), c)
    assert c.now() - first == pytest.approx(1)
    # The wall clock steps forward 2 h; the same stamp keeps its age growing at the real pace.
    fake.run(1)
    fake.step(7200)
    c.check()
    assert steady_stamp(written, written, first, c.now() - 1, c.now(), c) == first
    # A new beat written before the step but seen after it is no older than the last read.
    last_read = c.now()
    fake.run(1)
    old_frame = written + 1.5
    assert steady_stamp(old_frame, written, first, last_read, c.now(), c) >= last_read
    # Stepped back 1 h: a beat written just before the step does not look an hour ahead.
    fake.run(1)
    last_read = c.now()
    before = fake.wall - 0.2
    fake.step(-3600)
    c.check()
    fake.run(1)
    stamp = steady_stamp(before, old_frame, last_read - 1, last_read, c.now(), c)
    assert last_read <= stamp <= c.now()


def test_without_a_step_a_writer_ahead_still_shows_ahead(fake) -> None:
    c = SteadyClock()
    fake.run(5)
    ahead = fake.wall + 120  # a writer whose clock is 2 min ahead (NFS server, no NTP)
    assert steady_stamp(ahead, None, None, None, c.now(), c) - c.now() == pytest.approx(120)

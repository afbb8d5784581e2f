"""When detectors run (docs/architecture.md), through the real Daemon's `_after_round`,
`_periodic` and `_apply_reload` on a simulated clock (no scheduler, no threads): at idle the 5 s
tick is skipped while the 10 s rounds' passes keep every answer recent; while something is found
every tick runs, so a hold running out is judged as soon as before; a reload's answers are stale.

As the shipped config runs them: the process, heartbeat and npu probes' rounds every 10 s in one
batch (each starts a pass); the logs and kernel probes' rounds are quiet (no new line: no pass)."""

from __future__ import annotations

import types

import pytest

from watchdog import daemon as daemon_mod
from watchdog.config import load_config_text
from watchdog.core.findings import Finding
from watchdog.detectors import IncrementalDetectors
from watchdog.host import clock
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG
from watchdog.wiring.reload import Prepared

BATCH = frozenset({"process", "heartbeat", "npu"})


def _daemon(tmp_path, monkeypatch, now):
    monkeypatch.setattr(clock, "now", lambda: now[0])
    monkeypatch.setattr(daemon_mod, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    cfg = load_config_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nhttp: {{enabled: false}}\n"
                           "probes: {logs: {enabled: true}}\n")
    d = daemon_mod.Daemon(cfg, None)
    runs = {"logs": [], "liveness": [], "core": [], "hold_end": float("-inf")}

    def logs(view, config):
        # A log match's hold: the finding stands until `hold_end`.
        runs["logs"].append(view.now)
        if view.now < runs["hold_end"]:
            return [Finding(rule="log_oom", severity="critical", summary="oom", labels={"rank": "0"})]
        return []

    def liveness(view, config):
        runs["liveness"].append(view.now)
        if not LOGS_CONFIG.of(config).enabled:  # an answer that rests on a setting (the reload test)
            return [Finding(rule="heartbeat_stale", severity="critical", summary="stale", labels={"rank": "0"})]
        return []

    def core(view, config):
        runs["core"].append(view.now)
        return []

    d.detectors = IncrementalDetectors([("core", core), ("liveness", liveness), ("logs", logs)])
    handed = []
    d.engine.process = lambda findings, now_, blind: handed.append((now_, [f.rule for f in findings]))
    return d, runs, handed


def _simulate(d, now, t0, until, batch_offset, batches=True, at=None):
    """Ticks every 5 s at t0 + 5k; the 10 s batch settles at t0 + 10m + batch_offset; `at`:
    {time: callable} run at that simulated time."""
    events = [(t0 + 5.0 * k, "tick") for k in range(1, int((until - t0) / 5) + 1)]
    if batches:
        events += [(t0 + 10.0 * m + batch_offset, "batch") for m in range(0, int((until - t0) / 10))]
    events += [(t, "call") for t in (at or {})]
    for t, kind in sorted(events):
        now[0] = t
        if kind == "tick":
            d._periodic()
        elif kind == "batch":
            d._after_round(BATCH)
        else:
            at[t]()


def _start(tmp_path, monkeypatch):
    now = [1_800_000_000.0]
    d, runs, handed = _daemon(tmp_path, monkeypatch, now)
    d._last_periodic_eval = now[0]
    d.evaluate()  # the full pass at READY
    return d, runs, handed, now, now[0]


def _gaps(runs, name, t0):
    got = [t - t0 for t in runs[name]]
    return got, [b - a for a, b in zip(got, got[1:])]


@pytest.mark.parametrize("batch_offset", [0.6, 4.7], ids=["batch-0.6s-after-tick", "batch-0.3s-before-tick"])
def test_at_idle_the_ticks_are_skipped_and_the_rounds_keep_every_answer_recent(tmp_path, monkeypatch, batch_offset):
    d, runs, _, now, t0 = _start(tmp_path, monkeypatch)
    try:
        _simulate(d, now, t0, t0 + 120.0, batch_offset)
        assert d.periodic_skipped == 24 and d.passes == 1 + 12  # the full pass and each batch's
        for name in ("core", "liveness", "logs"):
            got, gaps = _gaps(runs, name, t0)
            assert all(round((t - batch_offset) % 10.0, 3) in (0.0, 10.0) for t in got[1:]), (name, got)
            assert max(gaps) <= 11.0, (name, got)  # SKIP_WITHIN
    finally:
        d.stop()


def test_when_rounds_stop_the_ticks_judge_every_answer_within_15_s(tmp_path, monkeypatch):
    d, runs, _, now, t0 = _start(tmp_path, monkeypatch)
    try:
        _simulate(d, now, t0, t0 + 120.0, 0.0, batches=False)  # hung probes, or only quiet ones
        for name in ("core", "liveness", "logs"):
            got, gaps = _gaps(runs, name, t0)
            assert max(gaps) <= 15.0 and len(got) >= 8, (name, got)
    finally:
        d.stop()


@pytest.mark.parametrize("batch_offset", [0.6, 4.7], ids=["batch-0.6s-after-tick", "batch-0.3s-before-tick"])
def test_while_a_log_finding_stands_every_tick_runs_and_its_hold_ends_in_time(tmp_path, monkeypatch, batch_offset):
    """The logs probe's rounds are quiet, so only the ticks and the batches judge a hold running
    out: while it stands every tick runs (as before the idle skip), and the alert's inhibitions
    and resolve see its end within a tick (a NaN line's hold still in force when the stall that
    inhibited it resolved paged, in a first version)."""
    d, runs, handed, now, t0 = _start(tmp_path, monkeypatch)
    runs["hold_end"] = t0 + 37.0
    try:
        d._after_round(BATCH)  # the match's pass
        _simulate(d, now, t0, t0 + 60.0, batch_offset)
        gone = [t for t, rules in handed if t >= runs["hold_end"] and "log_oom" not in rules]
        assert gone and gone[0] - runs["hold_end"] <= 5.0, handed
    finally:
        d.stop()


def test_a_reload_makes_every_answer_stale(tmp_path, monkeypatch):
    """A reload makes every answer stale (it may rest on a setting that changed, or on a probe now
    gone): the next tick runs every detector. Found by an attack pass on a first version: an
    answer resting on a setting the reload changed was handed on for up to 15 s."""
    d, runs, handed, now, t0 = _start(tmp_path, monkeypatch)
    try:
        new = load_config_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nhttp: {{enabled: false}}\n"
                               "probes: {logs: {enabled: false}}\n")
        reload_at = t0 + 30.7
        _simulate(d, now, t0, t0 + 60.0, 0.6, True, at={reload_at: lambda: d._apply_reload(Prepared(new, []))})
        found = [t for t, rules in handed if "heartbeat_stale" in rules]
        assert found and found[0] - reload_at <= 5.0, handed
    finally:
        d.stop()


def _simulate_main_loop(d, now, t0, until, batch_offset, batches=True):
    """As `_simulate`, with the tick's period moved by the main loop as the daemon does it
    (ProbeScheduler.tick_every after each turn, which falls just after a tick): 10 s while the
    daemon is idle, 5 s otherwise, on the grid t0 + 5k. Returns the ticks' times."""
    period, tick, ticks = daemon_mod.TICK_SECONDS, t0 + daemon_mod.TICK_SECONDS, []
    batch_times = [t0 + 10.0 * m + batch_offset for m in range(0, int((until - t0) / 10))] if batches else []
    while tick <= until:
        for t in [b for b in batch_times if b < tick]:
            now[0] = t
            d._after_round(BATCH)
            batch_times.remove(t)
        now[0] = tick
        d._periodic()
        ticks.append(tick - t0)
        period = daemon_mod.IDLE_TICK_SECONDS if d.idle else daemon_mod.TICK_SECONDS
        tick = t0 + (int((tick - t0) / period) + 1) * period
    return ticks


def test_at_idle_the_tick_slows_to_10_s_and_the_rounds_still_keep_every_answer_recent(tmp_path, monkeypatch):
    d, runs, _, now, t0 = _start(tmp_path, monkeypatch)
    try:
        ticks = _simulate_main_loop(d, now, t0, t0 + 120.0, 0.6)
        assert d.idle and ticks[:2] == [5.0, 10.0] and all(b - a == 10.0 for a, b in zip(ticks[1:], ticks[2:])), ticks
        for name in ("core", "liveness", "logs"):
            got, gaps = _gaps(runs, name, t0)
            assert max(gaps) <= 11.0, (name, got)  # SKIP_WITHIN: the rounds' passes, as at 5 s
    finally:
        d.stop()


def test_at_idle_when_rounds_stop_every_answer_is_judged_within_20_s_and_the_tick_is_5_s_again(tmp_path, monkeypatch):
    d, runs, _, now, t0 = _start(tmp_path, monkeypatch)
    try:
        _simulate_main_loop(d, now, t0, t0 + 60.0, 0.6)  # idle: the tick at 10 s
        stop = now[0]
        ticks = _simulate_main_loop(d, now, stop, stop + 60.0, 0.0, batches=False)
        got = [t - stop for t in runs["liveness"] if t > stop]
        assert got and got[0] <= 20.0, got  # the first 10 s tick past SKIP_WITHIN
        assert not d.idle and 5.0 in [b - a for a, b in zip(ticks, ticks[1:])], ticks
    finally:
        d.stop()


def test_while_a_finding_stands_the_tick_is_5_s_and_a_hold_ends_in_time(tmp_path, monkeypatch):
    d, runs, handed, now, t0 = _start(tmp_path, monkeypatch)
    try:
        _simulate_main_loop(d, now, t0, t0 + 30.0, 0.6)  # idle first: the tick at 10 s
        start = now[0]
        runs["hold_end"] = start + 27.0
        now[0] = start + 0.6
        d._after_round(BATCH)  # the match's pass
        assert not d.idle
        ticks = _simulate_main_loop(d, now, start, start + 60.0, 0.6)
        assert [b - a for a, b in zip(ticks, ticks[1:])][:4] == [5.0] * 4, ticks
        gone = [t for t, rules in handed if t >= runs["hold_end"] and "log_oom" not in rules]
        assert gone and gone[0] - runs["hold_end"] <= 5.0, handed
    finally:
        d.stop()

"""When detectors run (docs/architecture.md), through the real Daemon's `_after_round`,
`_periodic` and `_apply_reload` on a simulated clock (no scheduler, no threads): the 5 s tick
spares what the 10 s rounds keep judging, and still judges in time what only time changes.

Registered as the shipped config registers them: process, heartbeat, npu at 10 s (rounds that
always start a pass), kernel at 10 s and logs at 30 s (the logs probe registers its rescan), both
following changes (their rounds without a new line are quiet and start no pass)."""

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
    runs = {"logs": [], "liveness": [], "core": []}

    def logs(view, config):
        # A log match's hold: in force until the test's `hold_end`, and only while logs are enabled.
        runs["logs"].append(view.now)
        if LOGS_CONFIG.of(config).enabled and view.now < runs.get("hold_end", float("inf")):
            return [Finding(rule="log_oom", severity="critical", summary="oom", labels={"rank": "0"})]
        return []

    def other(name):
        def detect(view, config):
            runs[name].append(view.now)
            if name == "liveness" and runs.get("config_answer") and LOGS_CONFIG.of(config).enabled:
                # An answer that rests on a setting (any one: the reload test turns it off).
                return [Finding(rule="heartbeat_stale", severity="critical", summary="stale", labels={"rank": "0"})]
            return []
        return detect

    d.detectors = IncrementalDetectors([("core", other("core")), ("liveness", other("liveness")), ("logs", logs)])
    handed = []
    d.engine.process = lambda findings, now_, blind: handed.append((now_, [f.rule for f in findings]))
    return d, runs, handed


def _register(d, batches: bool):
    d.state.register("kernel", 10.0, follows_changes=True)
    d.state.register("logs", 30.0, follows_changes=True)
    if batches:
        for name in BATCH:
            d.state.register(name, 10.0)


def _simulate(d, now, t0, until, batch_offset, batches=True, at=None):
    """Ticks every 5 s at t0 + 5k; the 10 s batch settles at t0 + 10m + batch_offset; `at`:
    {time: callable} run at that simulated time."""
    events = [(t0 + 5.0 * k, "tick") for k in range(1, int((until - t0) / 5) + 1)]
    if batches:
        events += [(t0 + 10.0 * m + batch_offset, "batch") for m in range(0, int((until - t0) / 10) + 1)]
    events += [(t, "call") for t in (at or {})]
    for t, kind in sorted(events):
        now[0] = t
        if kind == "tick":
            d._periodic()
        elif kind == "batch":
            d._after_round(BATCH)
        else:
            at[t]()


@pytest.mark.parametrize("batch_offset,batches", [(0.6, True), (4.7, True), (0.0, False)],
                         ids=["batch-0.6s-after-tick", "batch-0.3s-before-tick", "only-quiet-probes"])
def test_what_the_rounds_judge_is_spared_and_a_log_hold_is_judged_as_before(tmp_path, monkeypatch, batch_offset,
                                                                            batches):
    """The log detectors (a hold running out; their own rounds are quiet) are judged every 4-5 s
    as before the cadences; liveness, fed by the 10 s rounds, once per batch and not by the
    ticks (by every tick, as before, where none of its probes runs rounds on its interval); a
    detector without trigger list on a node of quiet probes at the first tick after 11 s."""
    now = [1_800_000_000.0]
    t0 = now[0]
    d, runs, _ = _daemon(tmp_path, monkeypatch, now)
    try:
        _register(d, batches)
        d._last_periodic_eval = t0
        d.evaluate()  # the full pass at READY
        _simulate(d, now, t0, t0 + 120.0, batch_offset, batches)

        def gaps(name):
            got = [t - t0 for t in runs[name]]
            return got, [b - a for a, b in zip(got, got[1:])]

        got, logs_gaps = gaps("logs")
        assert max(logs_gaps) <= 5.5, f"the logs detector ran at {got}: a hold's end judged up to {max(logs_gaps):.1f} s late"
        got, live_gaps = gaps("liveness")
        if batches:
            # The full pass, then each batch's pass and no tick's.
            assert all(round((t - batch_offset) % 10.0, 3) in (0.0, 10.0) for t in got[1:]), got
            assert max(live_gaps) <= 10.0, got
        else:
            assert max(live_gaps) <= 5.0, got  # no probe of it runs rounds on its interval: as before
        got, core_gaps = gaps("core")
        assert max(core_gaps) <= (10.0 if batches else 15.5), got
    finally:
        d.stop()


def test_a_reload_makes_every_answer_stale(tmp_path, monkeypatch):
    """A reload makes every answer stale (it may rest on a setting that changed, or on a probe now
    gone): the next tick runs every detector, as it did before the cadences. Found by an attack
    pass: with the cadences alone, an answer of a detector fed by the 10 s rounds that rested on
    a setting the reload turned off was handed on for up to 15 s."""
    now = [1_800_000_000.0]
    t0 = now[0]
    d, runs, handed = _daemon(tmp_path, monkeypatch, now)
    runs["config_answer"] = True
    runs["hold_end"] = t0  # no log finding: only the liveness answer is followed
    try:
        _register(d, True)
        d._last_periodic_eval = t0
        d.evaluate()
        new = load_config_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nhttp: {{enabled: false}}\n"
                               "probes: {logs: {enabled: false}}\n")
        reload_at = t0 + 30.7

        def reload():
            d._apply_reload(Prepared(new, []))
            for name in BATCH:  # kept across the reload
                d.state.register(name, 10.0)
            d.state.register("kernel", 10.0, follows_changes=True)

        _simulate(d, now, t0, t0 + 60.0, 0.6, True, at={reload_at: reload})
        assert any("heartbeat_stale" in rules for t, rules in handed if t < reload_at)
        after = [t for t, rules in handed if t > reload_at and "heartbeat_stale" not in rules]
        assert after, handed
        assert after[0] - reload_at <= 5.5, f"an answer on the old config handed on {after[0] - reload_at:.1f} s after the reload"
    finally:
        d.stop()

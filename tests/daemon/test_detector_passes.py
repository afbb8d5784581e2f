"""Detector passes after a probe's round re-run only the detectors that probe feeds."""

from __future__ import annotations

from watchdog.config import load_config_text
from watchdog.detectors import IncrementalDetectors
from watchdog.core.findings import Finding
from watchdog.core.state import StateStore


def counting(name, calls):
    def detect(view, config):
        calls.append(name)
        return [Finding(rule=f"{name}_rule", severity="info", summary=f"{name} {len(calls)}", labels={"d": name})]
    return detect


def test_round_of_one_probe_reruns_only_its_detectors():
    calls = []
    passes = IncrementalDetectors([(n, counting(n, calls)) for n in ("core", "npu", "stall", "logs", "liveness")])
    view, config = StateStore().view(), load_config_text("")
    findings, errors = passes.run(view, config)  # full pass
    assert sorted(calls) == ["core", "liveness", "logs", "npu", "stall"] and not errors
    assert len(findings) == 5
    calls.clear()
    findings, _ = passes.run(view, config, "logs")
    # core has no trigger list (probe health of every probe): always; logs: its own probe.
    assert sorted(calls) == ["core", "logs"]
    # The others' last answers are still part of the pass.
    assert sorted(f.labels["d"] for f in findings) == ["core", "liveness", "logs", "npu", "stall"]
    calls.clear()
    passes.run(view, config, "npu")
    assert sorted(calls) == ["core", "npu", "stall"]
    calls.clear()
    passes.run(view, config, "command:fs")
    assert calls == ["core"]


def test_a_periodic_pass_keeps_answers_a_round_just_computed():
    calls = []
    passes = IncrementalDetectors([(n, counting(n, calls)) for n in ("core", "npu", "liveness")])
    config = load_config_text("")
    store = StateStore()
    passes.run(store.view(now=100.0), config)
    passes.run(store.view(now=101.0), config, "heartbeat")  # liveness ran at 101
    calls.clear()
    passes.run(store.view(now=104.0), config, fresh_within=4.0)
    # npu last ran at 100: 4 s ago is not fresh (no probe registered: no cadence of rounds); core
    # (no trigger list) ran with the heartbeat round and counts as judged for 11 s.
    assert sorted(calls) == ["npu"]
    calls.clear()
    passes.run(store.view(now=105.5), config, fresh_within=4.0)
    assert sorted(calls) == ["liveness"]
    calls.clear()
    passes.run(store.view(now=112.5), config, fresh_within=4.0)
    assert sorted(calls) == ["core", "liveness", "npu"]


def test_a_periodic_pass_spares_detectors_whose_probes_rounds_keep_judging_them():
    """Between two rounds of its probes only time changes a detector's answer: a periodic pass
    re-runs it when those rounds are late (its cadence, capped at 10 s, plus 1 s), not every 5 s."""
    calls = []
    passes = IncrementalDetectors([(n, counting(n, calls)) for n in ("core", "liveness", "logs", "subhealth")])
    config = load_config_text("")
    store = StateStore()
    # The logs and kernel probes follow changes: most of their rounds are quiet and judge nothing
    # (the logs probe registers its 30 s rescan as its interval), so they give no cadence.
    for probe, interval, follows in (("process", 10.0, False), ("heartbeat", 10.0, False), ("kernel", 10.0, True),
                                     ("logs", 30.0, True), ("subhealth", 60.0, False)):
        store.register(probe, interval, follows)
    passes.run(store.view(now=100.0), config)
    calls.clear()
    passes.run(store.view(now=105.0), config, fresh_within=4.0)
    # A log finding's hold running out is seen within 4 s, as before; the rest count for 11 s.
    assert calls == ["logs"]
    assert passes.all_fresh(108.9, 4.0) and not passes.all_fresh(109.0, 4.0)  # logs: 4 s
    calls.clear()
    passes.run(store.view(now=110.5), config, fresh_within=4.0)
    assert sorted(calls) == ["logs"]  # 10.5 s: the 10 s rounds may still be on their way
    calls.clear()
    passes.run(store.view(now=111.0), config, fresh_within=4.0)
    # Late rounds (a hung probe), a 60 s probe capped at 10 s, no trigger list: judged at 11 s.
    assert sorted(calls) == ["core", "liveness", "subhealth"]
    calls.clear()
    passes.run(store.view(now=112.0), config, "heartbeat", fresh_within=4.0)
    assert sorted(calls) == ["core", "liveness"]  # a round judges its detectors at once, as before
    calls.clear()
    passes.run(store.view(now=112.0), config)  # a full pass (start, reload) runs everything
    assert sorted(calls) == ["core", "liveness", "logs", "subhealth"]


def test_a_detector_that_raises_is_reported_and_others_still_run():
    calls = []

    def broken(view, config):
        raise RuntimeError("bug")

    passes = IncrementalDetectors([("npu", broken), ("logs", counting("logs", calls))])
    findings, errors = passes.run(StateStore().view(), load_config_text(""))
    assert errors == ["npu: RuntimeError: bug"] and [f.rule for f in findings] == ["logs_rule"]


def test_a_round_just_before_a_periodic_pass_runs_what_that_pass_would():
    calls = []
    passes = IncrementalDetectors([(n, counting(n, calls)) for n in ("core", "npu", "liveness", "logs")])
    config = load_config_text("")
    store = StateStore()
    passes.run(store.view(now=100.0), config)
    calls.clear()
    passes.run(store.view(now=102.0), config, "heartbeat", fresh_within=4.0)
    assert sorted(calls) == ["core", "liveness"]  # no periodic pass near: only its own detectors
    calls.clear()
    passes.run(store.view(now=103.0), config, "heartbeat", fresh_within=4.0, next_check=103.5)
    assert sorted(calls) == ["core", "liveness"]  # npu and logs will still be fresh at 103.5
    assert passes.all_fresh(103.9, 4.0) and not passes.all_fresh(104.0, 4.0)
    calls.clear()
    passes.run(store.view(now=105.0), config, "heartbeat", fresh_within=4.0, next_check=107.0)
    # npu and logs would be 7 s old at the periodic pass due at 107: this round's pass runs them.
    assert sorted(calls) == ["core", "liveness", "logs", "npu"]
    assert passes.all_fresh(107.0, 4.0)
    assert sorted(f.labels["d"] for f in passes.last_findings()) == ["core", "liveness", "logs", "npu"]


def test_daemon_skips_a_periodic_pass_only_when_it_would_change_nothing(tmp_path):
    from watchdog.daemon import Daemon
    from watchdog.host import clock

    cfg = load_config_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nhttp: {{enabled: false}}\n")
    d = Daemon(cfg, None)
    try:
        calls = []
        found = []

        def core(view, config):
            calls.append("core")
            return []

        def liveness(view, config):
            calls.append("liveness")
            return list(found)

        d.detectors = IncrementalDetectors([("core", core), ("liveness", liveness)])
        d._after_round("heartbeat")
        assert d.passes == 1 and sorted(calls) == ["core", "liveness"]

        def periodic(ran_ago: float) -> None:
            # The daemon's steady clock, not time.time(): the wall clock drifts from it (a VM's
            # clock is adjusted), and "ran 0 s ago" on the wall clock could be in its future.
            d.detectors._ran_at = {n: clock.now() - ran_ago for n in d.detectors._ran_at}
            d._last_periodic_eval = 0.0
            d._periodic()

        periodic(0.0)  # everything fresh, nothing found: skipped, no view built
        assert d.passes == 1 and d.periodic_skipped == 1
        periodic(12.0)  # older than its inputs' cadence (10 s rounds + 1 s): runs
        assert d.passes == 2 and d.periodic_skipped == 1
        found.append(Finding(rule="heartbeat_stale", severity="warning", summary="x", labels={"rank": "0"}))
        d._after_round("heartbeat")
        periodic(0.0)  # fresh, but something was found: the engine is handed it again, as before
        assert d.passes == 4 and d.periodic_skipped == 1
    finally:
        d.stop()

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


def counted(*names):
    """Passes over detectors that only record that they ran (in `calls`, returned beside them)."""
    calls = []
    return IncrementalDetectors([(n, counting(n, calls)) for n in names]), calls


def test_round_of_one_probe_reruns_only_its_detectors():
    passes, calls = counted("core", "npu", "stall", "logs", "liveness")
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
    passes, calls = counted("core", "npu", "liveness")
    config = load_config_text("")
    store = StateStore()
    passes.run(store.view(now=100.0), config)
    passes.run(store.view(now=101.0), config, "heartbeat")  # liveness ran at 101
    calls.clear()
    passes.run(store.view(now=104.0), config, fresh_within=4.0)
    assert sorted(calls) == ["core", "npu"]  # npu last ran at 100: 4 s ago is not fresh
    calls.clear()
    passes.run(store.view(now=105.5), config, fresh_within=4.0)
    assert sorted(calls) == ["core", "liveness"]


def test_a_detector_that_raises_is_reported_and_others_still_run():
    calls = []

    def broken(view, config):
        raise RuntimeError("bug")

    passes = IncrementalDetectors([("npu", broken), ("logs", counting("logs", calls))])
    findings, errors = passes.run(StateStore().view(), load_config_text(""))
    assert errors == ["npu: RuntimeError: bug"] and [f.rule for f in findings] == ["logs_rule"]


def test_a_rounds_pass_also_brings_every_stale_answer_up_to_date():
    """The view is at hand: a pass after a round also runs every detector whose answer is older
    than `fresh_within`, so the periodic tick finds them recent and may be skipped."""
    passes, calls = counted("core", "npu", "liveness", "logs")
    config = load_config_text("")
    store = StateStore()
    passes.run(store.view(now=100.0), config)
    calls.clear()
    passes.run(store.view(now=103.0), config, "heartbeat", fresh_within=4.0)
    assert sorted(calls) == ["core", "liveness"]  # npu and logs ran 3 s ago: only its own detectors
    assert passes.all_fresh(103.9, 4.0) and not passes.all_fresh(104.0, 4.0)
    calls.clear()
    passes.run(store.view(now=105.0), config, "heartbeat", fresh_within=4.0)
    assert sorted(calls) == ["core", "liveness", "logs", "npu"]  # npu and logs were 5 s old
    assert passes.all_fresh(108.9, 4.0) and passes.all_fresh(115.9, 11.0) and not passes.all_fresh(116.0, 11.0)
    assert sorted(f.labels["d"] for f in passes.last_findings()) == ["core", "liveness", "logs", "npu"]
    calls.clear()
    passes.run(store.view(now=106.0), config, "heartbeat")  # no `fresh_within`: its own detectors only
    assert sorted(calls) == ["core", "liveness"]


def test_a_reload_makes_every_answer_stale():
    passes, calls = counted("core", "npu", "liveness")
    config = load_config_text("")
    store = StateStore()
    passes.run(store.view(now=100.0), config)
    assert passes.all_fresh(101.0, 4.0)
    passes.reconfigured()
    assert not passes.all_fresh(101.0, 11.0)
    calls.clear()
    passes.run(store.view(now=101.0), config, fresh_within=4.0)
    assert sorted(calls) == ["core", "liveness", "npu"]


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
        periodic(10.5)  # nothing found and every answer younger than 11 s: the rounds keep them
        assert d.passes == 1 and d.periodic_skipped == 2
        periodic(11.5)  # rounds stopped or slow: runs
        assert d.passes == 2 and d.periodic_skipped == 2
        found.append(Finding(rule="heartbeat_stale", severity="warning", summary="x", labels={"rank": "0"}))
        d._after_round("heartbeat")
        periodic(0.0)  # fresh, but something was found: the engine is handed it again, as before
        assert d.passes == 4 and d.periodic_skipped == 2
        calls.clear()
        periodic(4.5)  # something found: every tick runs, and runs what is older than 4 s
        assert d.passes == 5 and sorted(calls) == ["core", "liveness"]
    finally:
        d.stop()

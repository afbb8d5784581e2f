"""Detector passes after a probe's round re-run only the detectors that probe feeds."""

from __future__ import annotations

from watchdog.config import load_config_text
from watchdog.detectors import IncrementalDetectors
from watchdog.findings import Finding
from watchdog.state import StateStore


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

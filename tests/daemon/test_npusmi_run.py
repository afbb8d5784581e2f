"""The npu-smi runner and the npu probe against the fake npu-smi (real subprocesses, real kills)."""

from __future__ import annotations

import json
import os

import psutil
import pytest

from tests.helpers import TESTS, wait_for
from watchdog.config.sections.npu import NpuProbeConfig
from watchdog.npusmi.run import NpuSmiRunError, NpuSmiStats, query_health, query_info
from watchdog.probes.base import ProbeError
from watchdog.core.state import FailureReason
from watchdog.probes.npu import NpuProbe

HERE = TESTS
FAKE = str(HERE / "fakes" / "npu-smi")
FIX = HERE / "fixtures" / "npu-smi"


@pytest.fixture
def scenario(tmp_path, monkeypatch):
    """Write a scenario file and point the fake at it; returns the writer."""
    path = tmp_path / "scenario.json"
    monkeypatch.setenv("FAKE_NPU_SMI_SCENARIO", str(path))
    monkeypatch.delenv("FAKE_NPU_SMI_CAPTURE", raising=False)

    def write(spec):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, path)
        return path

    return write


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_replays_a_capture(monkeypatch):
    monkeypatch.delenv("FAKE_NPU_SMI_SCENARIO", raising=False)
    monkeypatch.setenv("FAKE_NPU_SMI_CAPTURE", str(FIX / "info_910_A3_16die_24.1.rc3.5_idle.txt"))
    stats = NpuSmiStats()
    obs = query_info(FAKE, 10, stats=stats)
    assert len(obs.chips) == 16 and obs.version == "24.1.rc3.5"
    assert stats.calls == 1 and sum(stats.failures.values()) == 0


def test_hang_is_killed_with_its_process_group(scenario, tmp_path):
    pid_file = tmp_path / "pids"
    scenario({"behavior": "hang", "hang_child": True, "pid_file": str(pid_file)})
    stats = NpuSmiStats()
    # The timeout must outlast the fake's own start-up (a Python interpreter plus its child, which
    # takes over a second on a loaded 2-core machine), or it is killed before it writes its pids.
    with pytest.raises(NpuSmiRunError) as ei:
        query_info(FAKE, 6.0, stats=stats)
    assert ei.value.reason == "timeout"
    assert str(ei.value).startswith("npu-smi hung:")
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) == 2
    wait_for(lambda: all(_dead(p) for p in pids), timeout=10, what="fake npu-smi and its child killed")
    assert stats.failures["timeout"] == 1


def test_failure_text_is_unavailable_even_with_exit_zero(scenario):
    scenario({"behavior": "fail", "exit_code": 0})
    with pytest.raises(NpuSmiRunError) as ei:
        query_info(FAKE, 10, stats=None)
    assert ei.value.reason == "unavailable"
    assert "ret is -8020" in str(ei.value)


def test_non_zero_exit(scenario):
    scenario({"behavior": "fail", "fail_text": "something odd happened", "exit_code": 3})
    stats = NpuSmiStats()
    with pytest.raises(NpuSmiRunError) as ei:
        query_info(FAKE, 10, stats=stats)
    assert ei.value.reason == "exit"
    assert "exit code 3: something odd happened" in str(ei.value)
    assert stats.failures["exit"] == 1


@pytest.mark.parametrize("behavior", ["garbage", "empty"])
def test_garbage_and_empty_output_are_parse_failures(scenario, behavior):
    scenario({"behavior": behavior})
    with pytest.raises(NpuSmiRunError) as ei:
        query_info(FAKE, 10, stats=None)
    assert ei.value.reason == "parse"


def test_missing_binary(tmp_path):
    stats = NpuSmiStats()
    for program in (str(tmp_path / "no-such-npu-smi"), "no-such-npu-smi-on-path"):
        with pytest.raises(NpuSmiRunError) as ei:
            query_info(program, 5, stats=stats)
        assert ei.value.reason == "missing"
        assert "probes.npu.npu_smi" in str(ei.value)
    assert stats.failures["missing"] == 2


def test_health_query(scenario):
    scenario({"generate": {"npus": 2},
              "devices": {"1": {"health": "Alarm", "health_codes": ["8C084E00", "A4025021"],
                                "health_info": ["adda heart beat lost", "second line"]}}})
    h = query_health(FAKE, 1, 0, 10, stats=None)
    assert (h.status, h.codes, h.information) == ("Alarm", ("8C084E00", "A4025021"),
                                                  ("adda heart beat lost", "second line"))
    with pytest.raises(NpuSmiRunError) as ei:
        query_health(FAKE, 9, 0, 10, stats=None)  # no such card
    assert ei.value.reason == "unavailable"


def _probe(**kw) -> NpuProbe:
    return NpuProbe(NpuProbeConfig(enabled=True, npu_smi=FAKE, command_timeout="5s", **kw))


def test_probe_reports_missing_chips_and_health_codes(scenario):
    scenario({"generate": {"npus": 4},
              "devices": {"2": {"health": "Alarm", "health_codes": ["8C084E00"]}},
              "rounds": [{}, {"devices": {"3": {"gone": True}}}]})
    probe = _probe(health_interval="0s")
    first = probe.collect().value
    assert [c.npu for c in first.chips] == [0, 1, 2, 3] and first.missing == ()
    assert first.health_codes == {(2, 0): ["8C084E00"]}
    second = probe.collect()
    assert [c.npu for c in second.value.chips] == [0, 1, 2]
    assert [(c.npu, c.chip) for c in second.value.missing] == [(3, 0)]
    assert "MISSING: npu 3 chip 0" in second.summary


def test_probe_raises_probe_error_with_its_reason(scenario):
    scenario({"behavior": "fail", "exit_code": 1})
    with pytest.raises(ProbeError) as ei:
        _probe().collect()
    assert ei.value.reason is FailureReason.UNAVAILABLE
    assert str(ei.value).startswith("npu-smi unavailable:")  # the message people read


def test_probe_asks_health_only_for_unhealthy_chips_and_rate_limits(scenario, tmp_path, monkeypatch):
    scenario({"generate": {"npus": 3}, "devices": {"1": {"health": "Warning", "health_codes": ["80E01801"]}}})
    from watchdog.npusmi import run as run_mod

    stats = NpuSmiStats()
    monkeypatch.setattr(run_mod, "STATS", stats)
    calls = []
    real = run_mod.query_health

    def spy(program, npu, chip, timeout, stats=None):
        calls.append((npu, chip))
        return real(program, npu, chip, timeout, stats=None)

    monkeypatch.setattr("watchdog.probes.npu.query_health", spy)
    probe = _probe(health_interval="1h")
    for _ in range(3):
        obs = probe.collect().value
        assert obs.health_codes == {(1, 0): ["80E01801"]}
    assert calls == [(1, 0)]


def test_fake_generates_a3_and_sparse_ids_the_parser_reads(scenario):
    scenario({"generate": {"npus": 2, "chips_per_npu": 2, "name": "Ascend910", "npu_ids": [0, 32768]},
              "devices": {"32768:1": {"hbm_used_mb": 41000, "aicore": 12}}})
    obs = query_info(FAKE, 10, stats=None)
    assert [(c.npu, c.chip, c.device_id, c.power_w) for c in obs.chips] == [
        (0, 0, 0, 95.0), (0, 1, 1, None), (32768, 0, 2, 95.0), (32768, 1, 3, None)]
    last = obs.chips[-1]
    assert (last.hbm_used_mb, last.aicore_util_pct) == (41000, 12.0)


def test_fake_rounds_advance_per_info_call_only(scenario):
    scenario({"generate": {"npus": 1}, "rounds": [{"devices": {"0": {"aicore": 10}}},
                                                  {"devices": {"0": {"aicore": 20, "health": "Alarm"}}}]})
    assert query_info(FAKE, 10, stats=None).chips[0].aicore_util_pct == 10.0
    assert query_health(FAKE, 0, 0, 10, stats=None).status == "OK"  # health does not advance rounds
    assert query_info(FAKE, 10, stats=None).chips[0].aicore_util_pct == 20.0
    assert query_health(FAKE, 0, 0, 10, stats=None).status == "Alarm"
    assert query_info(FAKE, 10, stats=None).chips[0].aicore_util_pct == 20.0  # the last round repeats

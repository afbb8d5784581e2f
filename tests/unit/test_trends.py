"""NPU trend detectors on synthetic series: each rule positive and negative, at synthetic times."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.synth import BASE, T0, Synth, beats, chip, npu_obs, procs, rules
from watchdog.config.schema import Config
from watchdog.metrics import trends as trend_metrics
from watchdog.runtime import Runtime

GIB_MB = 1024


def eight(util=50.0, hbm=30000, **kw):
    return [chip(n, util=util, hbm=hbm, **kw) for n in range(8)]


# --- npu_idle ---------------------------------------------------------------------------------

def test_idle_fires_per_held_chip_after_the_window_only():
    s = Synth(probes=("npu",))
    s.feed(T0, T0 + 300, npu=lambda t: npu_obs(eight(util=90)))
    s.feed(T0 + 310, T0 + 310 + 660, npu=lambda t: npu_obs(eight(util=1), held=[0, 1, 2, 3]))
    # 9m50s idle: not yet
    assert rules(s.npu(T0 + 310 + 590), "npu_idle") == []
    found = rules(s.npu(T0 + 310 + 660), "npu_idle")
    assert sorted(f.labels["npu"] for f in found) == ["0", "1", "2", "3"]  # 4..7 hold no process
    f = found[0]
    assert f.labels == {**BASE, "npu": "0", "chip": "0"}
    assert f.severity == "warning" and f.since == T0 + 310
    assert f.details["pids"] == [1000] and "HCCL" in f.hint


def test_idle_not_while_the_chip_works_or_during_a_checkpoint():
    s = Synth(probes=("npu",))
    s.feed(T0, T0 + 1200, npu=lambda t: npu_obs(eight(util=0 if int(t) % 60 else 80)))
    assert rules(s.npu(T0 + 1200), "npu_idle") == []

    c = Synth(probes=("npu", "heartbeat"))
    c.feed(T0, T0 + 1500, npu=lambda t: npu_obs(eight(util=0)),
           heartbeat=lambda t: beats([100] * 8, t, phases=["checkpoint"] + ["train"] * 7))
    assert rules(c.npu(T0 + 1500), "npu_idle") == []  # checkpoint: 30m
    c.feed(T0 + 1510, T0 + 1810, npu=lambda t: npu_obs(eight(util=0)),
           heartbeat=lambda t: beats([100] * 8, t, phases=["checkpoint"] + ["train"] * 7))
    assert len(rules(c.npu(T0 + 1810), "npu_idle")) == 8


def test_idle_uses_all_chips_when_npu_smi_shows_no_processes_but_ranks_run():
    s = Synth(probes=("npu", "process"))
    s.feed(T0, T0 + 700, npu=lambda t: npu_obs(eight(util=0), held=[]), process=lambda t: procs(8, 0.0))
    assert len(rules(s.npu(T0 + 700), "npu_idle")) == 8
    # No process table and no process probe: nobody is known to hold the chips: silent.
    n = Synth(probes=("npu",))
    n.feed(T0, T0 + 700, npu=lambda t: npu_obs(eight(util=0), held=[]))
    assert rules(n.npu(T0 + 700), "npu_idle") == []


# --- npu_busy_hang ------------------------------------------------------------------------------

def test_busy_hang_needs_pegged_ai_core_and_no_progress():
    s = Synth(probes=("npu", "heartbeat"))
    s.feed(T0, T0 + 700, npu=lambda t: npu_obs(eight(util=99)), heartbeat=lambda t: beats([42] * 8, t))
    found = rules(s.npu(T0 + 700), "npu_busy_hang")
    assert len(found) == 8 and all(f.severity == "critical" for f in found)
    assert found[0].details["progress_sources"] == ("heartbeat",)

    ok = Synth(probes=("npu", "heartbeat"))
    ok.feed(T0, T0 + 700, npu=lambda t: npu_obs(eight(util=99)),
            heartbeat=lambda t: beats([int((t - T0) // 30)] * 8, t))
    assert rules(ok.npu(T0 + 700), "npu_busy_hang") == []

    blind = Synth(probes=("npu",))  # no progress source: pegged just means "training"
    blind.feed(T0, T0 + 700, npu=lambda t: npu_obs(eight(util=99)))
    assert rules(blind.npu(T0 + 700), "npu_busy_hang") == []


# --- npu_low_util -------------------------------------------------------------------------------

def test_low_util_warns_on_a_starving_pipeline_only():
    s = Synth(probes=("npu",))
    s.feed(T0, T0 + 660, npu=lambda t: npu_obs(eight(util=5 if int(t) % 20 else 40)))
    found = rules(s.npu(T0 + 660), "npu_low_util")
    assert len(found) == 8 and found[0].severity == "warning"
    assert 5 <= found[0].details["mean_aicore_util_pct"] < 30

    busy = Synth(probes=("npu",))
    busy.feed(T0, T0 + 660, npu=lambda t: npu_obs(eight(util=10 if int(t) % 20 else 95)))
    assert rules(busy.npu(T0 + 660), "npu_low_util") == []
    idle = Synth(probes=("npu",))  # idle is npu_idle's business, not "starving"
    idle.feed(T0, T0 + 660, npu=lambda t: npu_obs(eight(util=1)))
    assert rules(idle.npu(T0 + 660), "npu_low_util") == []
    short = Synth(probes=("npu",))  # less history than the window: no judgement yet
    short.feed(T0, T0 + 500, npu=lambda t: npu_obs(eight(util=12)))
    assert rules(short.npu(T0 + 500), "npu_low_util") == []


# --- hbm_growth ---------------------------------------------------------------------------------

def _hbm_synth(hbm_of_t, minutes=35, every=30.0):
    s = Synth(probes=("npu",))
    end = T0 + minutes * 60
    s.feed(T0, end, every=every, npu=lambda t: npu_obs([chip(0, hbm=int(hbm_of_t(t - T0))), chip(1, hbm=30000)]))
    return s, end


def test_hbm_flat_and_saw_tooth_do_not_fire():
    flat, end = _hbm_synth(lambda dt: 40000 + (dt % 90 == 0) * 3)
    assert rules(flat.npu(end), "hbm_growth") == []
    # Caching allocator / empty_cache pattern: up 20 GB within a step, back down after it.
    saw, end = _hbm_synth(lambda dt: 30000 + (dt % 300) / 300 * 20000)
    assert rules(saw.npu(end), "hbm_growth") == []
    # Rising saw-tooth that gives memory back each cycle still is not "monotonic or stair-step".
    saw2, end = _hbm_synth(lambda dt: 30000 + dt / 60 * 100 + (dt % 300) / 300 * 8000)
    assert rules(saw2.npu(end), "hbm_growth") == []
    # The job starts 10 minutes into the window: HBM ramps to 60 GB within 2 minutes, then stays.
    ramp, end = _hbm_synth(lambda dt: 3 if dt < 600 else min(60000, 3 + (dt - 600) * 500))
    assert rules(ramp.npu(end), "hbm_growth") == []


def test_hbm_stair_step_leak_warns_with_a_linear_eta():
    # +1 GiB every 5 minutes (the "stair-step" leak), 30 GiB used of 64 GiB.
    s, end = _hbm_synth(lambda dt: 30000 + (dt // 300) * GIB_MB)
    [f] = rules(s.npu(end), "hbm_growth")
    assert f.labels == {**BASE, "npu": "0", "chip": "0"}
    assert f.severity == "warning"
    used_mb = 30000 + (35 * 60 // 300) * GIB_MB
    rate_mb_s = GIB_MB / 300
    expected = (65536 - used_mb) / rate_mb_s
    assert f.details["eta_seconds"] == pytest.approx(expected, rel=0.25)
    assert f.details["max_drop_bytes"] == 0

    fast, end = _hbm_synth(lambda dt: 20000 + dt / 60 * 1100)  # ~1.1 GB/min, nearly full
    [g] = rules(fast.npu(end), "hbm_growth")
    assert g.severity == "critical" and g.details["eta_seconds"] < 15 * 60


def test_hbm_eta_metric_only_for_the_growing_chip():
    s, end = _hbm_synth(lambda dt: 30000 + (dt // 300) * GIB_MB)
    rt = Runtime(config=s.config, state=s.store, engine=None)
    rt.publish({trend_metrics.__name__: trend_metrics.evaluate(s.view(end), s.config)})
    got = {(m.name, tuple(sorted(m.labels.items()))): m.value for m in trend_metrics.samples(rt)}
    eta = [(k, v) for k, v in got.items() if k[0] == "npu_watchdog_npu_hbm_full_eta_seconds"]
    assert len(eta) == 1 and eta[0][0][1] == (("chip", "0"), ("npu", "0")) and eta[0][1] > 0
    assert got[("npu_watchdog_job_stalled", (("training_job", "job-a"),))] == 0


# --- npu_unhealthy ------------------------------------------------------------------------------

def test_health_alarm_is_critical_with_codes_and_warning_is_warning():
    s = Synth(probes=("npu",))
    s.feed(T0, T0 + 60, npu=lambda t: npu_obs(eight()))
    chips = eight()
    chips[2] = chip(2, health="Alarm")
    chips[6] = chip(6, health="Warning")
    s.put("npu", npu_obs(chips, codes={(2, 0): ["0x80E18401", "0x80E3A202"]}), T0 + 70)
    found = {f.labels["npu"]: f for f in rules(s.npu(T0 + 70), "npu_unhealthy")}
    assert set(found) == {"2", "6"}
    assert found["2"].severity == "critical" and found["2"].details["codes"] == ["0x80E18401", "0x80E3A202"]
    assert "0x80E18401" in found["2"].summary and found["2"].since == T0 + 70
    assert found["6"].severity == "warning" and found["6"].details["codes"] == []
    s.put("npu", npu_obs(eight()), T0 + 80)
    assert rules(s.npu(T0 + 80), "npu_unhealthy") == []


# --- npu_missing ------------------------------------------------------------------------------

def test_missing_chip_is_critical_and_named():
    s = Synth(probes=("npu",), history=600)
    s.feed(T0, T0 + 100, npu=lambda t: npu_obs(eight()))
    assert rules(s.npu(T0 + 100), "npu_missing") == []
    rest = [c for c in eight() if c.npu != 5]
    s.put("npu", npu_obs(rest), T0 + 110)
    [f] = rules(s.npu(T0 + 110), "npu_missing")
    assert f.labels == {**BASE, "npu": "5", "chip": "0"} and f.severity == "critical"
    assert f.since == T0 + 100 and f.details["chips_visible"] == 7
    # Long after the history forgot chip 5, the probe's `missing` list keeps it reported.
    seen = [(n, 0) for n in range(8)]
    s.feed(T0 + 120, T0 + 2000, every=60, npu=lambda t: npu_obs(rest, seen=seen))
    assert [f.labels["npu"] for f in rules(s.npu(T0 + 2000), "npu_missing")] == ["5"]


def test_expected_chip_count_reports_a_short_node_from_the_start():
    s = Synth(probes=("npu",), trends={"expected_chips": 8})
    s.put("npu", npu_obs(eight()[:6]), T0)
    [f] = rules(s.npu(T0), "npu_missing")
    assert f.labels == BASE and f.details["chips_expected"] == 8 and f.details["chips_visible"] == 6
    s.put("npu", npu_obs(eight()), T0 + 10)
    assert rules(s.npu(T0 + 10), "npu_missing") == []


# --- npu_temperature ----------------------------------------------------------------------------

def test_temperature_over_threshold_for_the_duration():
    s = Synth(probes=("npu",))
    s.feed(T0, T0 + 90, npu=lambda t: npu_obs([chip(0, temp=95), chip(1, temp=60)]))
    assert rules(s.npu(T0 + 90), "npu_temperature") == []  # 90 s < 2m
    s.feed(T0 + 100, T0 + 130, npu=lambda t: npu_obs([chip(0, temp=96), chip(1, temp=60)]))
    [f] = rules(s.npu(T0 + 130), "npu_temperature")
    assert f.labels["npu"] == "0" and f.severity == "warning" and f.since == T0
    s.feed(T0 + 140, T0 + 300, npu=lambda t: npu_obs([chip(0, temp=102), chip(1, temp=60)]))
    [g] = rules(s.npu(T0 + 300), "npu_temperature")
    assert g.severity == "critical"
    # A dip below the threshold restarts the clock.
    s.put("npu", npu_obs([chip(0, temp=80), chip(1, temp=60)]), T0 + 310)
    s.feed(T0 + 320, T0 + 400, npu=lambda t: npu_obs([chip(0, temp=99), chip(1, temp=60)]))
    assert rules(s.npu(T0 + 400), "npu_temperature") == []


# --- blindness and config -------------------------------------------------------------------

def test_nothing_fires_while_the_npu_probe_is_down():
    s = Synth(probes=("npu",))
    s.feed(T0, T0 + 900, npu=lambda t: npu_obs(eight(util=0, health="Alarm")))
    assert rules(s.npu(T0 + 900), "npu_idle") and rules(s.npu(T0 + 900), "npu_unhealthy")
    s.down("npu")
    assert s.npu(T0 + 900) == []


def test_trends_config_defaults_and_errors():
    c = Config().trends
    assert (c.idle_below_pct, c.idle_for, c.busy_for, c.low_util_for) == (5.0, 600.0, 600.0, 600.0)
    assert c.hbm_eta_critical == 900.0 and c.hbm_min_growth == 1 << 30
    with pytest.raises(ValidationError, match="idle_below_pct must be below busy_above_pct"):
        Config.model_validate({"trends": {"idle_below_pct": 96}})
    with pytest.raises(ValidationError, match="expected a duration"):
        Config.model_validate({"trends": {"idle_for": 600}})
    with pytest.raises(ValidationError):
        Config.model_validate({"trends": {"idle_pct": 3}})

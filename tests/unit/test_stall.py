"""The fused stall rule on synthetic series: when it fires, how it classifies, when it must not."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.synth import BASE, T0, Synth, beats, chip, logs, npu_obs, procs
from watchdog.config.schema import Config
from watchdog.detectors.stall import assess
from watchdog.metrics import trends as trend_metrics

N = 8


def healthy(s: Synth, start: float, end: float) -> float:
    """Training normally: steps advance every 10 s, NPUs busy with moving HBM, ranks burn CPU."""
    return s.feed(start, end,
                  npu=lambda t: npu_obs([chip(n, util=70 + (t % 30), hbm=30000 + int(t % 50)) for n in range(N)]),
                  process=lambda t: procs(N, 8.0),
                  heartbeat=lambda t: beats([int((t - T0) // 10)] * N, t))


def hung(s: Synth, start: float, end: float, utils=None, steps=None, phases=None, cpu=0.2, states=None,
         hbm=None) -> float:
    """Everything frozen: step stuck, AI Core at `utils`, HBM constant, ranks' CPU ~0."""
    utils = utils or [0.0] * N
    steps = steps or [100] * N
    return s.feed(start, end,
                  npu=lambda t: npu_obs([chip(n, util=utils[n], hbm=(hbm(t) if hbm else 30000))
                                         for n in range(N)]),
                  process=lambda t: procs(N, cpu, states=states),
                  heartbeat=lambda t: beats(steps, t, phases=phases))


def stalls(s: Synth, now: float):
    return s.stall(now)


def test_collective_hang_after_two_minutes_and_not_before():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 420)
    assert stalls(s, T0 + 420) == []  # 110 s of quiet
    hung(s, T0 + 430, T0 + 440)
    [f] = stalls(s, T0 + 440)
    assert f.rule == "stall" and f.severity == "critical"
    assert f.labels == BASE  # one grouped finding per job
    assert f.details["classification"] == "collective_hang"
    assert "Entry-" in f.hint and "HCCL_EXEC_TIMEOUT" in f.hint
    assert len(f.details["devices"]) == N and {d["state"] for d in f.details["devices"]} == {"idle"}
    assert [r["rank"] for r in f.details["ranks"]] == list(range(N))
    assert set(f.details["sources"]) == {"heartbeat", "npu", "process"}
    assert f.since >= T0 + 300 and f.details["progress_age_seconds"] >= 120


def test_stall_clears_when_progress_resumes_and_fires_again():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 600)
    [first] = stalls(s, T0 + 600)
    end = healthy(s, T0 + 610, T0 + 700)
    assert stalls(s, end) == []
    assert assess(s.view(end), s.config).stalled is False
    hung(s, T0 + 710, T0 + 1000)
    [again] = stalls(s, T0 + 1000)
    assert again.key == first.key and again.since > first.since


def test_checkpoint_longer_than_the_train_threshold_does_not_stall():
    s = Synth()
    healthy(s, T0, T0 + 300)
    # Rank 0 writes a checkpoint; the others wait in a barrier still saying "train".
    phases = ["checkpoint"] + ["train"] * (N - 1)
    hung(s, T0 + 310, T0 + 310 + 20 * 60, phases=phases)
    assert stalls(s, T0 + 310 + 20 * 60) == []
    a = assess(s.view(T0 + 310 + 20 * 60), s.config)
    assert a.phase == "checkpoint" and a.threshold == 1800.0
    # Past the checkpoint's own 30 minutes it is a stall after all.
    hung(s, T0 + 320 + 20 * 60, T0 + 320 + 31 * 60, phases=phases)
    assert len(stalls(s, T0 + 320 + 31 * 60)) == 1


def test_eval_phase_uses_its_longer_threshold():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 310 + 10 * 60, phases=["eval"] * N)
    assert stalls(s, T0 + 310 + 10 * 60) == []
    hung(s, T0 + 320 + 10 * 60, T0 + 320 + 16 * 60, phases=["eval"] * N)
    [f] = stalls(s, T0 + 320 + 16 * 60)
    assert f.details["phase"] == "eval" and f.details["threshold_seconds"] == 900.0


def test_leaving_a_long_checkpoint_is_progress():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 310 + 20 * 60, phases=["checkpoint"] * N)
    # Back to train, same step, one minute later: not 21 minutes without progress.
    end = hung(s, T0 + 320 + 20 * 60, T0 + 380 + 20 * 60, phases=["train"] * N)
    assert stalls(s, end) == []


def test_done_never_stalls():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 7000, phases=["done"] * N)
    assert stalls(s, T0 + 7000) == []
    assert assess(s.view(T0 + 7000), s.config).reason == "the job reports phase done"


def test_one_pegged_device_among_idle_ones_is_single_device():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 500, utils=[0, 0, 0, 100, 0, 0, 0, 0])
    [f] = stalls(s, T0 + 500)
    assert f.details["classification"] == "single_device"
    assert f.details["suspects"] == ["npu 3 chip 0 (pegged while the others are idle)"]
    assert "npu-smi info -t health" in f.hint


def test_one_idle_device_among_pegged_ones_is_single_device():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 500, utils=[99, 99, 99, 99, 99, 0, 99, 99])
    [f] = stalls(s, T0 + 500)
    assert f.details["classification"] == "single_device"
    assert f.details["suspects"][0].startswith("npu 5 chip 0")


def test_all_devices_pegged_is_busy_hang():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 500, utils=[100.0] * N)
    [f] = stalls(s, T0 + 500)
    assert f.details["classification"] == "busy_hang"
    assert "operator" in f.hint and len(f.details["suspects"]) == N


def test_one_rank_behind_or_in_d_state_is_single_rank():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 500, steps=[100, 100, 100, 100, 100, 97, 100, 100])
    [f] = stalls(s, T0 + 500)
    assert f.details["classification"] == "single_rank"
    assert f.details["suspects"] == ["rank 5 (step 97 while the others are at 100)"]

    # One step apart is how the ranks of a hung collective stop (and throttled heartbeats report a
    # few steps apart anyway): still a collective hang, not a suspect rank.
    c = Synth()
    healthy(c, T0, T0 + 300)
    hung(c, T0 + 310, T0 + 500, steps=[100, 100, 100, 100, 100, 99, 100, 100])
    [h] = stalls(c, T0 + 500)
    assert h.details["classification"] == "collective_hang", h.details

    d = Synth()
    healthy(d, T0, T0 + 300)
    hung(d, T0 + 310, T0 + 500, states={2: "disk-sleep"})
    [g] = stalls(d, T0 + 500)
    assert g.details["classification"] == "single_rank"
    assert g.details["suspects"] == ["rank 2 (process state disk-sleep)"]


def test_one_unhealthy_idle_device_is_single_device():
    s = Synth()
    healthy(s, T0, T0 + 300)
    s.feed(T0 + 310, T0 + 500,
           npu=lambda t: npu_obs([chip(n, util=0, health="Alarm" if n == 6 else "OK") for n in range(N)]),
           process=lambda t: procs(N, 0.1), heartbeat=lambda t: beats([100] * N, t))
    [f] = stalls(s, T0 + 500)
    assert f.details["classification"] == "single_device" and f.details["suspects"][0].startswith("npu 6")


@pytest.mark.parametrize("what", ["device_active", "hbm_moving", "cpu_busy", "steps_advance"])
def test_any_sign_of_life_vetoes_the_stall(what):
    s = Synth()
    healthy(s, T0, T0 + 300)
    if what == "device_active":
        hung(s, T0 + 310, T0 + 900, utils=[0, 0, 45, 0, 0, 0, 0, 0])
    elif what == "hbm_moving":
        hung(s, T0 + 310, T0 + 900, hbm=lambda t: 30000 + int(t - T0) * 2)
    elif what == "cpu_busy":
        hung(s, T0 + 310, T0 + 900, cpu=9.0)
    else:
        s.feed(T0 + 310, T0 + 900, npu=lambda t: npu_obs([chip(n, util=0) for n in range(N)]),
               process=lambda t: procs(N, 0.1), heartbeat=lambda t: beats([int(t // 60)] * N, t))
    assert stalls(s, T0 + 900) == []


def test_a_probe_that_is_down_is_not_no_activity():
    s = Synth()
    healthy(s, T0, T0 + 300)
    hung(s, T0 + 310, T0 + 900)
    assert len(stalls(s, T0 + 900)) == 1
    s.down("npu")
    assert stalls(s, T0 + 900) == []
    assert assess(s.view(T0 + 900), s.config).reason == "cannot judge: probe npu is down"


def test_no_evidence_source_never_fires():
    s = Synth(probes=())
    assert stalls(s, T0 + 9999) == []
    # The process probe alone (quiet CPU) is not enough evidence to call a stall.
    p = Synth(probes=("process",))
    p.feed(T0, T0 + 900, process=lambda t: procs(N, 0.0))
    assert stalls(p, T0 + 900) == []
    assert assess(p.view(T0 + 900), p.config).reason == "no progress or device evidence configured"


def test_unconfigured_sources_are_left_out_of_the_and():
    # Only npu + process (MindCluster style).
    s = Synth(probes=("npu", "process"))
    s.feed(T0, T0 + 200, npu=lambda t: npu_obs([chip(n, util=0) for n in range(N)]),
           process=lambda t: procs(N, 0.0))
    [f] = stalls(s, T0 + 200)
    assert f.details["sources"] == ["npu", "process"] and f.details["progress_age_seconds"] is None
    # Only a heartbeat.
    h = Synth(probes=("heartbeat",))
    h.feed(T0, T0 + 100, heartbeat=lambda t: beats([int((t - T0) // 10)] * 2, t))
    h.feed(T0 + 110, T0 + 250, heartbeat=lambda t: beats([100, 100], t))
    assert stalls(h, T0 + 220) == []
    [g] = stalls(h, T0 + 250)
    assert g.details["classification"] == "collective_hang" and g.details["sources"] == ["heartbeat"]


def test_training_log_lines_are_progress_and_other_sources_can_be_excluded():
    s = Synth(probes=("npu", "logs"), stall={"log_sources": ["train"]})
    idle = lambda t: npu_obs([chip(n, util=0) for n in range(N)])  # noqa: E731
    # The training log writes a line every 30 s: no stall although the NPUs idle (e.g. a slow input).
    s.feed(T0, T0 + 600, npu=idle,
           logs=lambda t: logs({"train": T0 + 30 * ((t - T0) // 30), "plog": t}, {"train": 1, "plog": 2}))
    assert stalls(s, T0 + 600) == []
    # The training log stops; plog keeps writing (not a progress source here).
    s.feed(T0 + 610, T0 + 800, npu=idle,
           logs=lambda t: logs({"train": T0 + 600, "plog": t}, {"plog": 2}))
    [f] = stalls(s, T0 + 800)
    assert f.details["sources"] == ["logs", "npu"]
    assert f.details["progress_age_seconds"] == pytest.approx(200, abs=1)


def test_touch_only_heartbeat_keeps_the_job_alive():
    s = Synth(probes=("npu", "heartbeat"))
    s.feed(T0, T0 + 600, npu=lambda t: npu_obs([chip(n, util=0) for n in range(N)]),
           heartbeat=lambda t: beats([None] * N, t))
    assert stalls(s, T0 + 600) == []


def test_stall_metrics_follow_the_same_assessment():
    s = Synth()
    healthy(s, T0, T0 + 300)
    end = hung(s, T0 + 310, T0 + 600)

    got = {m.name: m for m in trend_metrics.evaluate(s.view(end), s.config)}
    assert got["npu_watchdog_job_stalled"].value == 1 and got["npu_watchdog_job_stalled"].labels == {"training_job": "job-a"}
    assert got["npu_watchdog_job_progress_age_seconds"].value == pytest.approx(end - (T0 + 300), abs=10)


def test_stall_config_defaults_merge_and_errors():
    c = Config().stall
    assert c.duration == 120.0 and c.idle_below_pct == 5.0 and c.enabled
    assert c.phases == {"init": 1800.0, "checkpoint": 1800.0, "eval": 900.0}
    merged = Config.model_validate({"stall": {"phases": {"checkpoint": "1h", "warmup": "10m"}}}).stall.phases
    assert merged == {"init": 1800.0, "checkpoint": 3600.0, "eval": 900.0, "warmup": 600.0}
    with pytest.raises(ValidationError, match="never stalls"):
        Config.model_validate({"stall": {"phases": {"done": "1h"}}})
    with pytest.raises(ValidationError, match="expected a duration"):
        Config.model_validate({"stall": {"duration": "soon"}})
    off = Synth(stall={"enabled": False})
    healthy(off, T0, T0 + 300)
    hung(off, T0 + 310, T0 + 900)
    assert stalls(off, T0 + 900) == []


def test_a_single_device_job_has_no_collective_to_hang_in():
    s = Synth()
    s.feed(T0, T0 + 100, npu=lambda t: npu_obs([chip(0, util=80 + t % 9, hbm=30000 + int(t % 40))]),
           process=lambda t: procs(1, 5.0), heartbeat=lambda t: beats([int((t - T0) // 10)], t))
    s.feed(T0 + 110, T0 + 300, npu=lambda t: npu_obs([chip(0, util=0)]),
           process=lambda t: procs(1, 0.0), heartbeat=lambda t: beats([10], t))
    [f] = stalls(s, T0 + 300)
    assert f.details["classification"] == "single_rank" and f.details["suspects"] == ["rank 0"]

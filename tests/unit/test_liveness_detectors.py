"""Liveness detectors on synthetic state views: rules that need long histories or kernel states
(D sleep) a test cannot produce on demand. Time is explicit, so these are exact and instant."""

from __future__ import annotations

import math

from watchdog.config.schema import Config
from watchdog.detectors.liveness import detect
from watchdog.observations import HeartbeatObservation, HeartbeatReading, ProcessInfo, ProcessObservation
from watchdog.core.state import ProbeStatus, Sample, StateView

T0 = 1_700_000_000.0
BASE = {"host": "node-t", "training_job": "job-t"}


def config(**hb):
    return Config.model_validate({
        "node": {"name": "node-t"}, "job": {"name": "job-t"}, "paths": {"state_dir": "/nonexistent"},
        "probes": {"heartbeat": {"enabled": True, "paths": ["hb/rank*.json"], **hb},
                   "process": {"enabled": True, "cmdline": "train.py", "disk_sleep_after": "2m"}},
    })


def reading(rank, t, **kw):
    kw.setdefault("step", int(t - T0))
    kw.setdefault("step_changed_at", t)
    kw.setdefault("phase", "train")
    return HeartbeatReading(path=f"hb/rank{rank}.json", rank=rank, exists=True, mtime=t, beat_time=t, **kw)


def view(now, hb=(), proc=()):
    samples = {}
    if hb:
        samples["heartbeat"] = tuple(Sample(t, HeartbeatObservation(tuple(rs))) for t, rs in hb)
    if proc:
        samples["process"] = tuple(Sample(t, o) for t, o in proc)
    return StateView(now=now, started_at=T0 - 3600, samples=samples,
                     statuses={"heartbeat": ProbeStatus("heartbeat", 10, up=True)})


def rules(findings):
    return sorted((f.rule, f.labels.get("rank")) for f in findings)


def test_loss_scale_collapse_is_judged_by_the_trend_not_a_count():
    cfg = config(loss_scale={"drops": 6, "window": "10m", "min": 1.0, "below": 128.0})
    hb = [(T0 + i * 30, [reading(0, T0 + i * 30, loss_scale=65536.0 / 2 ** i, loss=2.0)]) for i in range(10)]
    # Eight halvings to 256: fell 256x, but 256 is still inside fp16's usual range.
    out = detect(view(T0 + 8 * 30 + 1, hb[:9]), cfg)
    assert not [f for f in out if f.rule == "loss_scale_collapse"]
    # One more, to 128: fell 512x (>= 2^6) and is at the bottom of the range.
    out = detect(view(T0 + 9 * 30 + 1, hb), cfg)
    f = [f for f in out if f.rule == "loss_scale_collapse"]
    assert f and f[0].labels == {**BASE, "rank": "0"} and f[0].details["window_peak"] == 65536.0
    assert "from 65536 within" in f[0].summary
    # A few early overflow skips are normal.
    out = detect(view(T0 + 3 * 30 + 1, hb[:4]), cfg)
    assert not [f for f in out if f.rule == "loss_scale_collapse"]
    # Start-up calibration from 2^32 falls 4096x in minutes but ends far above the range's bottom.
    cal = [(T0 + i * 30, [reading(0, T0 + i * 30, loss_scale=2.0 ** (32 - i), loss=2.0)]) for i in range(13)]
    out = detect(view(T0 + 12 * 30 + 1, cal), cfg)
    assert not [f for f in out if f.rule == "loss_scale_collapse"]
    # DeepSpeed's 64 -> 2 within minutes (five halvings) is a collapse with the default drops (5).
    ds = [(T0 + i * 60, [reading(0, T0 + i * 60, loss_scale=64.0 / 2 ** i, loss=2.0)]) for i in range(6)]
    out = detect(view(T0 + 5 * 60 + 1, ds), config(loss_scale={"window": "10m"}))
    assert rules(out) == [("loss_scale_collapse", "0")]
    # At the floor it has collapsed whatever the history says.
    out = detect(view(T0 + 1, [(T0, [reading(0, T0, loss_scale=0.5)])]), cfg)
    assert rules(out) == [("loss_scale_collapse", "0")]


def test_throughput_drop_against_recent_median_must_be_sustained():
    cfg = config(throughput={"ratio": 0.5, "window": "30m", "sustained": "2m", "min_baseline": "5m"})
    hb = [(T0 + i * 10, [reading(0, T0 + i * 10, throughput=1000.0)]) for i in range(60)]
    drop_at = T0 + 600
    hb += [(drop_at + i * 10, [reading(0, drop_at + i * 10, throughput=300.0, throughput_unit="tokens_per_s")])
           for i in range(1, 14)]
    now = drop_at + 130
    f = [f for f in detect(view(now, hb), cfg) if f.rule == "throughput_drop"]
    assert f and f[0].labels == {**BASE, "rank": "0"} and f[0].details["median"] == 1000.0
    # Only 60 s into the drop: not yet.
    early = [x for x in hb if x[0] <= drop_at + 60]
    assert not [f for f in detect(view(drop_at + 61, early), cfg) if f.rule == "throughput_drop"]


def test_straggler_by_steps_and_by_age():
    cfg = config(straggler={"steps": 50, "age": "2m"}, stale_after={"train": "10m"})
    now = T0 + 1000
    rs = [reading(0, now - 5, step=900), reading(1, now - 5, step=905), reading(2, now - 5, step=820)]
    out = detect(view(now, [(now, rs)]), cfg)
    assert rules(out) == [("rank_straggler", "2")]
    rs = [reading(0, now - 5, step=900), reading(1, now - 5, step=900), reading(2, now - 200, step=900)]
    out = detect(view(now, [(now, rs)]), cfg)
    assert rules(out) == [("rank_straggler", "2")]


def test_nan_loss_and_phase_thresholds():
    cfg = config(stale_after={"train": "5m", "eval": "30m"})
    now = T0 + 5000
    rs = [reading(0, now - 400, phase="eval"), reading(1, now - 2000), reading(2, now - 1, loss=math.inf)]
    out = detect(view(now, [(now, rs)]), cfg)
    # The job's most lenient phase (eval, 30m) covers rank 0 and rank 1 alike: only rank 1, past it, is stale.
    assert rules(out) == [("heartbeat_stale", "1"), ("loss_nan", "2")]


def test_one_rank_in_checkpoint_covers_its_peers_waiting_in_a_barrier():
    """Rank 0 writes a checkpoint; ranks 1-7 wait in a barrier still reporting `train` and write
    no heartbeat: none of them is stale before the checkpoint threshold."""
    cfg = config(stale_after={"train": "5m", "checkpoint": "30m"})
    now = T0 + 5000
    rs = [reading(0, now - 900, phase="checkpoint")] + [reading(r, now - 900) for r in range(1, 8)]
    assert rules(detect(view(now, [(now, rs)]), cfg)) == []
    later = now + 1000  # past the checkpoint threshold: the whole job is stale
    assert len(rules(detect(view(later, [(later, rs)]), cfg))) == 8


def test_disk_sleep_longer_than_threshold_with_pid_label():
    cfg = config()
    def proc(state, t):
        info = ProcessInfo(pid=4242, rank=5, state=state, create_time=T0 - 10, cpu_seconds=1.0, cpu_delta=0.0,
                           rss_bytes=1, threads=1, cmdline=("python", "train.py"))
        return (t, ProcessObservation(processes=(info,), first_seen_at=T0 - 10))
    hist = [proc("running", T0)] + [proc("disk-sleep", T0 + 10 * i) for i in range(1, 14)]
    out = detect(view(T0 + 125, proc=hist[:12]), cfg)
    assert not [f for f in out if f.rule == "rank_disk_sleep"]  # 110 s < 2 min
    out = detect(view(T0 + 135, proc=hist), cfg)
    f = [f for f in out if f.rule == "rank_disk_sleep"]
    assert f and f[0].labels == {**BASE, "rank": "5", "pid": "4242"} and f[0].since == T0 + 10

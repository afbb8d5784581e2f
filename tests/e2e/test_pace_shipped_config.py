"""Issue "slow ranks and goodput", on the zero-config path: the daemon runs the shipped example
config (no job, probes or paths; only the pace's time constants are shortened, below, and in the
phases row the stall's train duration), 8 real rank processes under a torchrun-like launcher
printing Megatron-LM's iteration lines with their measured `elapsed time per iteration (ms)`
(tests/fakes/trainjob/train.py, pace mode), and the
fake npu-smi whose table follows the ranks (tests.jobkit.FakeNpuNode): a slowed rank's chip stays
busier while its peers wait, a slower input pipeline leaves every chip waiting alike. One test per
row of the issue; each counts the messages per channel (Feishu: warning and up; the ops webhook:
critical) and checks what they name.

Scale. The shipped pace needs 3 minutes of warm-up and two 40 s windows of baseline before it
judges; here warm-up 10 s, window 20 s, `slow_for` 10 s and `pause_min` 3 s (steps of 0.3 s). The
goodput row keeps the proportions of "a 5-minute hang in 30 minutes" with 1 minute = 2 s: 60 s of
job, a 10 s hang (the pause threshold is not scaled: 3 s, against the shipped 10 s and 5 steps).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Dict, List, Optional

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.jobkit import FakeNpuNode, ShippedDaemon, TrainJob, sent

pytestmark = pytest.mark.slow

PACE = {"pace": {"warmup": "10s", "window": "20s", "slow_for": "10s", "pause_min": "3s"}}
STEP_S = "0.3"


def pace_row(d: ShippedDaemon, name: str) -> Optional[Dict]:
    rows = [r for r in d.status().get("pace", []) if r["training_job"] == name]
    return rows[0] if rows else None


def start(tmp_path, name_env: str, **env: str) -> TrainJob:
    return TrainJob(tmp_path / "job", ranks=8, tag=f"t-{uuid.uuid4().hex[:12]}",
                    env={"NPU_WATCHDOG_HEARTBEAT": f"{tmp_path}/hb/", "NPU_WATCHDOG_JOB": name_env,
                         "FAKE_TRAIN_STEP_SECONDS": STEP_S, **env})


def baseline_known(d: ShippedDaemon, name: str) -> Dict:
    """Wait until the job's pace has its baseline (warm-up and two windows after discovery)."""
    return wait_for(lambda: (pace_row(d, name) or {}).get("baseline_step_seconds") and pace_row(d, name),
                    timeout=180, what=f"{name}: pace baseline")


def slowdowns(d: ShippedDaemon) -> List[Dict]:
    return [f for f in d.findings() if f["rule"] == "job_slowdown"]


def feishu_texts(fs: Receiver) -> List[str]:
    return [json.dumps(r.json, ensure_ascii=False) for r in fs.accepted()]


def test_one_rank_slowed_names_its_chip_and_rank(tmp_path):
    """Rank 3's chip computes 20 % longer: every rank steps 20 % slower, chip 3 stays busier than
    its peers. One warning on Feishu naming npu 3 and rank 3, nothing on the critical webhook; it
    resolves when the pace returns."""
    name = "pace-one"
    job = start(tmp_path, name)
    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, job:
        node.place(job, 0)
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url, PACE) as d:
            row = baseline_known(d, name)
            assert 0.25 <= row["baseline_step_seconds"] <= 0.4, row
            assert sent(hook, fs)["feishu"] == {"firing": 0, "resolved": 0}
            job.slow(1.2, rank=3)
            slowed = time.time()
            wait_for(lambda: sent(hook, fs)["feishu"]["firing"], timeout=120, what="the slowdown warning")
            latency = time.time() - slowed
            (f,) = slowdowns(d)
            print(f"job_slowdown sent {latency:.1f} s after the slowdown began; finding since "
                  f"{f['since'] - slowed:+.1f} s")
            assert f["labels"]["training_job"] == name and f["severity"] == "warning"
            assert [(s["npu"], s["rank"]) for s in f["details"]["suspects"]] == [(3, 3)], f
            assert 12 <= f["details"]["slower_pct"] <= 30, f
            (text,) = feishu_texts(fs)
            assert name in text and "npu 3 chip 0 (rank 3)" in text, text
            (tmp_path / "job" / "ctl" / "slow-3").unlink()
            wait_for(lambda: sent(hook, fs)["feishu"]["resolved"], timeout=150, what="the resolved message")
            time.sleep(10)  # anything else would have come by now
            assert sent(hook, fs)["feishu"] == {"firing": 1, "resolved": 1}
            assert sent(hook, fs)["webhook"] == {"firing": 0, "resolved": 0}


def test_every_chip_slowed_names_no_suspect(tmp_path):
    """The input pipeline slows every rank 20 % and every chip waits alike: one warning, no
    suspect chip, the message says none stands out."""
    name = "pace-all"
    job = start(tmp_path, name)
    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, job:
        node.place(job, 0)
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url, PACE) as d:
            baseline_known(d, name)
            job.slow(1.2)
            wait_for(lambda: sent(hook, fs)["feishu"]["firing"], timeout=120, what="the slowdown warning")
            (f,) = slowdowns(d)
            assert f["details"]["suspects"] == [], f
            (text,) = feishu_texts(fs)
            assert name in text and not re.search(r"npu \d+ chip", text + f["value"]), (text, f["value"])
            assert "no chip of this node stands out" in f["summary"]
            time.sleep(15)
            assert sent(hook, fs)["feishu"] == {"firing": 1, "resolved": 0}
            assert sent(hook, fs)["webhook"] == {"firing": 0, "resolved": 0}


def test_warmup_checkpoint_and_eval_send_nothing(tmp_path):
    """The job's first seconds run 3x slower (compilation), then a 45 s checkpoint and a 30 s
    evaluation (the heartbeat says the phase, rank 0 prints Megatron's lines): no message on any
    channel, no job_slowdown at any time; the pauses are booked as checkpoint and eval. The train
    phase's stall duration is scaled to 30 s (shipped: 2 min) so that both pauses outlast it, as
    the shipped 2 minutes and a real checkpoint do: the stall rule must take them by their phases."""
    name = "pace-phases"
    job = start(tmp_path, name, FAKE_TRAIN_WARMUP_SECONDS="8")
    seen: List[Dict] = []

    def watch(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            seen.extend(slowdowns(d))
            time.sleep(1)

    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, job:
        node.place(job, 0)
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url,
                           {**PACE, "stall": {"duration": "30s"}}) as d:
            baseline_known(d, name)
            watch(5)
            job.phase("checkpoint", True)
            watch(45)
            job.phase("checkpoint", False)
            watch(15)
            job.phase("eval", True)
            watch(30)
            job.phase("eval", False)
            watch(30)
            assert seen == []
            assert sent(hook, fs)["feishu"] == {"firing": 0, "resolved": 0}, feishu_texts(fs)
            assert sent(hook, fs)["webhook"] == {"firing": 0, "resolved": 0}
            row = pace_row(d, name)
            secs = row["seconds"]
            print(f"pace row: {row}")
            # Booked as their phases, never as a stall (durations checked loosely: a loaded machine
            # stretches the test's own sleeps; the lines' time stamps keep the daemon's side exact).
            assert 35 <= secs["checkpoint"] <= 100, row
            assert 20 <= secs["eval"] <= 80, row
            assert secs["stalled"] < 5, row


def test_hang_of_5_in_30_gives_goodput_83(tmp_path):
    """30 units of 2 s: 15 train, a hang of 5 (every rank blocked in a collective, chips idle),
    10 train, a clean end. /metrics and the job-end message say goodput 83 % (-4, +2: see below)."""
    name = "pace-goodput"
    job = start(tmp_path, name)
    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, job:
        node.place(job, 0)
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url, PACE) as d:
            total = lambda: sum((pace_row(d, name) or {}).get("seconds", {}).values())  # noqa: E731
            wait_for(lambda: total() >= 30, timeout=120, what="15 units of training")
            job.hang()
            time.sleep(10)
            job.resume()
            wait_for(lambda: total() >= 60, timeout=120, what="10 units more")
            share = pace_row(d, name)["goodput_ratio"]
            metrics = d.get("/metrics")
            m = re.search(rf'npu_watchdog_job_goodput_ratio{{training_job="{name}"}} ([0-9.]+)', metrics)
            # 25 of 30 units: 83 %. The bounds follow the hang the ranks really made, 8-12 s (the
            # booked stall is checked below): a loaded machine stretches the test's sleep and the
            # job's start (a full run read 80.95 %), and it also shortens the hang, which begins
            # at the ranks' next step boundary, up to a slow warm-up step after `hang()` (a full
            # run read 85.03 %: 9 s of hang in 60). 1 - 8/60 = 86.7 %.
            assert m and 0.79 <= float(m.group(1)) <= 0.87, (m and m.group(0), pace_row(d, name))
            job.finish()
            assert job.wait() == 0
            (f,) = wait_for(lambda: [x for x in d.findings() if x["rule"] == "job_finished"
                                     and x["labels"]["training_job"] == name] or None, timeout=90,
                            what="job_finished")
            said = re.search(r"goodput ([0-9.]+) %", f["summary"])
            assert said and 79 <= float(said.group(1)) <= 87, (f["summary"], share)
            assert 0.79 <= f["details"]["goodput_ratio"] <= 0.87
            # The same sentence for the Chinese message (its rule template plus `said`).
            said_zh = re.search(r"有效训练占比 ([0-9.]+)%", f["details"]["said"]["zh"])
            assert said_zh and said_zh.group(1) == said.group(1), f["details"]["said"]
            assert 8 <= f["details"]["seconds"]["stalled"] <= 12, f["details"]
            assert sent(hook, fs)["webhook"] == {"firing": 0, "resolved": 0}

"""Each framework integration against the real daemon: a real tiny training run per framework
(torch, transformers, Lightning, DeepSpeed; stand-ins for MindSpore and Megatron, see
tests/trainers/standins/README.md) plays one scenario (tests/trainers/scenario.py): a healthy
baseline, an evaluation and a checkpoint, a starving data loader, a NaN loss, recovery, a normal
end. The daemon must see the step advance and every phase, page the NaN exactly once and the
throughput drop exactly once, and resolve both, with nothing else sent.

Frameworks come from the `integrations` extra; a missing one skips with the package to install.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from typing import Dict, Set

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import REPO, parse_metrics, wait_for, http_get

TRAINERS = REPO / "tests" / "trainers"
PKG_DIR = REPO / "contrib" / "heartbeat"

pytestmark = pytest.mark.slow

#: script, modules it needs (-> the package providing them), extra PYTHONPATH, extra env.
CASES = {
    "torch": ("torch_loop.py", {"torch": "torch"}),
    "hf": ("hf_trainer.py", {"torch": "torch", "transformers": "transformers", "accelerate": "accelerate"}),
    "lightning": ("lightning_trainer.py", {"torch": "torch", "lightning": "lightning"}),
    "deepspeed": ("deepspeed_trainer.py", {"torch": "torch", "deepspeed": "deepspeed"}),
    "mindspore-standin": ("mindspore_standin.py", {}),
    "megatron-standin": ("megatron_standin.py", {}),
}


def _skip_unless_installed(needs: Dict[str, str]) -> None:
    for module, package in needs.items():
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install {package}, or the `integrations` extra)")


def _daemon_config(hb_dir, rx_url):
    return {
        "probes": {"heartbeat": {
            "enabled": True, "interval": "300ms", "paths": [f"{hb_dir}/rank*.json"],
            "throughput": {"ratio": 0.5, "window": "60s", "sustained": "2s", "min_baseline": "3s"},
        }},
        # The drop must hold 1 s (default 5 min): the run is 20 s long.
        "alerting": {"group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms",
                     "retry_max": "1s", "for": {"throughput_drop": "1s"},
                     "channels": [{"type": "webhook", "name": "hook", "url": rx_url}]},
    }


class MetricsWatcher(threading.Thread):
    """Polls /metrics while the trainer runs: the phases and steps the daemon reported for rank 0."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.phases, self.steps = url, set(), []  # type: str, Set[str], list
        self.seen: Set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            try:
                code, body = http_get(self.url + "/metrics")
            except OSError:  # the daemon busy or stopping: the next poll counts
                continue
            if code != 200:
                continue
            for key, value in parse_metrics(body).items():
                if 'rank="0"' not in key:
                    continue
                name = key.split("{")[0]
                self.seen.add(name)
                if name == "npu_watchdog_heartbeat_phase" and value == 1:
                    self.phases.add(key.split('phase="')[1].split('"')[0])
                elif name == "npu_watchdog_heartbeat_step":
                    self.steps.append(value)


def _alert_counts(rx) -> Counter:
    counts: Counter = Counter()
    for msg in rx.accepted():
        for alert in msg.json["alerts"]:
            counts[(alert["labels"]["alertname"], alert["status"])] += 1
    return counts


@pytest.mark.parametrize("case", sorted(CASES))
def test_framework_run_is_seen_by_the_daemon(case, tmp_path, make_daemon):
    script, needs = CASES[case]
    _skip_unless_installed(needs)
    if case == "deepspeed" and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("DeepSpeed's CPU accelerator builds a C++ op at first use: install a C++ compiler (Debian g++)")
    hb_dir, run_dir = tmp_path / "hb", tmp_path / "run"
    hb_dir.mkdir()
    run_dir.mkdir()
    path = [str(PKG_DIR), str(TRAINERS)] + ([str(TRAINERS / "standins")] if "standin" in case else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "NPU_WATCHDOG_HEARTBEAT": f"{hb_dir}/",
           "RANK": "0", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with Receiver("webhook") as rx:
        d = make_daemon(_daemon_config(hb_dir, rx.url))
        watcher = MetricsWatcher(d.url)
        watcher.start()
        log = tmp_path / "trainer.log"
        with open(log, "wb") as out:
            proc = subprocess.run([sys.executable, str(TRAINERS / script)], env=env, cwd=str(run_dir),
                                  stdout=out, stderr=subprocess.STDOUT, timeout=600)
        assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]
        wait_for(lambda: "done" in watcher.phases, timeout=20, what="the done phase")
        expected = Counter({("loss_nan", "firing"): 1, ("loss_nan", "resolved"): 1,
                            ("throughput_drop", "firing"): 1, ("throughput_drop", "resolved"): 1})
        wait_for(lambda: _alert_counts(rx) == expected, timeout=30,
                 what=f"one NaN and one throughput drop, each fired and resolved (got {_alert_counts(rx)})")
        watcher.stop.set()
        watcher.join(5)
    assert {"train", "eval", "checkpoint", "done"} <= watcher.phases, watcher.phases
    assert watcher.steps and max(watcher.steps) > 50 and watcher.steps == sorted(watcher.steps)
    # Step, loss, throughput and phase per rank are what /metrics shows.
    assert {"npu_watchdog_heartbeat_step", "npu_watchdog_heartbeat_loss",
            "npu_watchdog_heartbeat_phase"} <= watcher.seen
    assert any(name.startswith(("npu_watchdog_heartbeat_tokens_per_second", "npu_watchdog_heartbeat_samples_per_second"))
               for name in watcher.seen), watcher.seen
    ring = hb_dir / "rank0.json.ring"
    assert ring.exists() and ring.stat().st_size == 64 + 512 * 96

"""The grad norm from each framework hook, against the real daemon: a real tiny run whose
gradients turn NaN while its loss reads 0.0 (the Ascend failure the runbook warns about, which
only the grad norm shows) pages `loss_nan` exactly once and resolves once when the gradients are
finite again.

Lightning comes from the `integrations` extra. MindSpore is not in it (its CPU wheel is large and
needs numpy < 2): `pip install mindspore 'numpy<2'` into the test's interpreter, or point
NPU_WATCHDOG_MINDSPORE_PYTHON at an interpreter that has it. A missing framework skips, naming
the package. (HF Trainer, DeepSpeed and Megatron report the grad norm too: tests/e2e/test_integrations.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import REPO, wait_for

TRAINERS = REPO / "tests" / "trainers"
PKG_DIR = REPO / "contrib" / "heartbeat"

pytestmark = pytest.mark.slow


def _interpreter(module: str, override: str) -> str:
    """The interpreter that can import `module`: this one, or the one named by `override`."""
    for python in filter(None, (os.environ.get(override), sys.executable)):
        if subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0:
            return python
    pytest.skip(f"{module} is not installed (pip install {module}; or set {override})")


CASES = {
    "lightning": ("gradnan_lightning.py", "lightning", "NPU_WATCHDOG_LIGHTNING_PYTHON"),
    "mindspore": ("gradnan_mindspore.py", "mindspore", "NPU_WATCHDOG_MINDSPORE_PYTHON"),
}


def _alerts(rx) -> Counter:
    return Counter((a["labels"]["alertname"], a["status"]) for m in rx.accepted() for a in m.json["alerts"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_nan_grad_norm_with_loss_zero_pages_once(case, tmp_path, make_daemon):
    script, module, override = CASES[case]
    python = _interpreter(module, override)
    hb_dir, run_dir = tmp_path / "hb", tmp_path / "run"
    hb_dir.mkdir()
    run_dir.mkdir()
    with Receiver("webhook") as rx:
        make_daemon({
            "probes": {"heartbeat": {"enabled": True, "interval": "200ms", "paths": [f"{hb_dir}/rank*.json"]}},
            "alerting": {"group_window": "200ms", "resolve_delay": "1s", "retry_initial": "300ms",
                         "retry_max": "1s", "channels": [{"type": "webhook", "name": "hook", "url": rx.url}]},
        })
        env = {**os.environ, "PYTHONPATH": str(PKG_DIR), "NPU_WATCHDOG_HEARTBEAT": f"{hb_dir}/", "RANK": "0",
               "OMP_NUM_THREADS": "1", "GLOG_v": "3"}
        log = tmp_path / "trainer.log"
        with open(log, "wb") as out:
            proc = subprocess.run([python, str(TRAINERS / script)], env=env, cwd=str(run_dir),
                                  stdout=out, stderr=subprocess.STDOUT, timeout=600)
        assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]
        expected = Counter({("loss_nan", "firing"): 1, ("loss_nan", "resolved"): 1})
        wait_for(lambda: _alerts(rx) == expected, timeout=30,
                 what=f"one loss_nan, fired and resolved (got {_alerts(rx)})")
        fired = [a for m in rx.accepted() for a in m.json["alerts"] if a["status"] == "firing"]
    text = str(fired[0])
    assert "grad_norm" in text and "nan" in text.lower(), fired
    assert fired[0]["labels"].get("rank") == "0", fired[0]["labels"]

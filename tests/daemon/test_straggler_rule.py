"""contrib/prometheus: the fleet straggler rule's promtool tests can fail. A rule that names any
node of a slow job (the busy-asymmetry condition dropped) is caught by the uniformly-slower case,
and one that needs a 30-point asymmetry misses the one slow node of 16.

promtool comes from Debian's `prometheus` package (.ci/system-packages installs it).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

RULES_DIR = REPO / "contrib" / "prometheus"
RULES = RULES_DIR / "npu-watchdog.rules.yml"
TEST = RULES_DIR / "tests" / "npu-watchdog-straggler.test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package `prometheus`)")
ASYMMETRY = ") >= 0.10\n          and on (training_job) (training_job:npu_watchdog_job_slowdown_ratio:median >= 1.15)"


def run_with(tmp_path: Path, rules: str) -> subprocess.CompletedProcess:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / RULES.name).write_text(rules)
    shutil.copy(TEST, tmp_path / "tests" / TEST.name)
    return subprocess.run([PROMTOOL, "test", "rules", f"tests/{TEST.name}"], capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))


@needs_promtool
def test_the_straggler_tests_pass_as_shipped(tmp_path):
    r = run_with(tmp_path, RULES.read_text())
    assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
@pytest.mark.parametrize("broken, missed", [
    (") >= -1\n          and on (training_job) (training_job:npu_watchdog_job_slowdown_ratio:median >= 1.15)", "job-u"),
    (") >= 0.30\n          and on (training_job) (training_job:npu_watchdog_job_slowdown_ratio:median >= 1.15)", "s07"),
], ids=["names-every-node", "misses-the-slow-node"])
def test_a_broken_straggler_rule_fails_its_tests(tmp_path, broken, missed):
    shipped = RULES.read_text()
    assert ASYMMETRY in shipped
    r = run_with(tmp_path, shipped.replace(ASYMMETRY, broken))
    assert r.returncode != 0
    assert "job_straggler_node" in r.stdout + r.stderr and missed in r.stdout + r.stderr

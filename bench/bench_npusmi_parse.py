"""Micro benchmark: time to parse one `npu-smi info` of an 8-card 910B node with processes.

Run by hand (`make bench`); the result line goes into the README. Uses the fake npu-smi's table
generator so the input is the shape the daemon parses every round (8 chips, 4 processes per card).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from watchdog.npusmi.parse import parse_info  # noqa: E402


def table() -> str:
    procs = [{"npu": n, "chip": 0, "pid": 10000 + 10 * n + i, "name": "python", "memory_mb": 15000}
             for n in range(8) for i in range(4)]
    spec = {"generate": {"npus": 8, "aicore": 87, "hbm_used_mb": 61000}, "processes": procs}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.json")
        with open(path, "w") as fh:
            json.dump(spec, fh)
        env = dict(os.environ, FAKE_NPU_SMI_SCENARIO=path)
        return subprocess.run([str(REPO / "tests" / "fakes" / "npu-smi"), "info"], env=env,
                              capture_output=True, text=True, check=True).stdout


def main() -> None:
    text = table()
    obs = parse_info(text)
    assert len(obs.chips) == 8 and len(obs.processes) == 32
    n = 2000
    for _ in range(100):
        parse_info(text)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            parse_info(text)
        best = min(best, (time.perf_counter() - start) / n)
    print(f"parse_info: 8 chips + 32 processes ({len(text.splitlines())} lines): "
          f"{best * 1e6:.0f} us per parse (best of 5 x {n})")


if __name__ == "__main__":
    main()

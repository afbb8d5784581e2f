"""Micro benchmark: what one `Heartbeat.beat()` costs the training loop (trainer-side package).

Measures the per-step cost with the flight recorder on and off, with the file throttled
(`min_interval` 10 s, the default: most beats only update memory and the ring mapping), and
counts the file writes and the bytes the process wrote (from /proc/self/io `wchar`), so the
claim "no disk write per step beyond the page cache" is measured, not assumed.
Run by hand (`make bench`); numbers go into docs/integrations/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "contrib" / "heartbeat"))

from npu_watchdog_heartbeat import Heartbeat, Pace  # noqa: E402


def wchar() -> int:
    try:
        for line in open("/proc/self/io"):
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def run(steps: int, ring: bool) -> tuple:
    with tempfile.TemporaryDirectory() as tmp:
        hb = Heartbeat(os.path.join(tmp, "rank{rank}.json"), rank=0, min_interval=10.0, flight_recorder=ring)
        pace = Pace()
        pace.start()
        hb.phase_now("train")
        w0, t0 = wchar(), time.perf_counter()
        for step in range(1, steps + 1):
            hb.beat(step=step, loss=1.0 / step, grad_norm=0.5, lr=3e-4, loss_scale=65536.0,
                    tokens_per_s=pace.step_end(4096))
        took = time.perf_counter() - t0
        return took / steps, hb.writes, wchar() - w0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    steps = 20_000 if args.quick else args.steps
    print(f"# {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}, command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    rows = []
    for ring in (False, True):
        best = min((run(steps, ring) for _ in range(3)), key=lambda r: r[0])
        rows.append(best)
        print(f"flight recorder {'on ' if ring else 'off'}: {best[0] * 1e6:.1f} us per beat, "
              f"{best[1]} file writes and {best[2]} bytes written for {steps} steps")
    per_beat = rows[1][0]
    print(f"SUMMARY beat with flight recorder {per_beat * 1e6:.1f} us (target < 100 us: "
          f"{'PASS' if per_beat < 100e-6 else 'MISS'})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Live tailing: how fast the running daemon catches up with a backlog, and what idle costs.

    python bench/bench_catchup.py                  # 512 MB backlog over 4 files
    python bench/bench_catchup.py --size-mb 128    # smaller

The daemon (subprocess, default logs settings: change events, 64 MiB per round, 8 MiB slices,
every shipped rule) follows 4 training logs. The script appends the backlog (training-style lines
with a failure line at the end of each file) as fast as it can, then polls
`npu_watchdog_log_bytes_read_total` every 20 ms until all of it is read: MB/s from the end of the
write to the last byte read, and the daemon's CPU seconds meanwhile. Before the backlog, 60 s with no write: the daemon's CPU
and its log rounds over that minute (idle logs should cost nothing).
Target: >= 200 MB/s while catching up, no rounds while idle.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.bench_logscan import generate  # noqa: E402
from tests.helpers import free_port, http_get, parse_metrics, wait_for  # noqa: E402

FILES = 4


def metrics(port: int) -> dict:
    return parse_metrics(http_get(f"http://127.0.0.1:{port}/metrics")[1])


def idle(ps: psutil.Process, port: int, seconds: float) -> str:
    """The daemon's CPU and log rounds while nobody writes (before the backlog)."""
    key = 'npu_watchdog_probe_runs_total{probe="logs"}'
    runs0, c0 = metrics(port)[key], sum(ps.cpu_times()[:2])
    time.sleep(seconds)
    cpu, runs = sum(ps.cpu_times()[:2]) - c0, metrics(port)[key] - runs0
    return (f"idle {seconds:.0f} s before the backlog: daemon CPU {cpu:.3f} s, log rounds {runs:.0f} "
            f"(the safety rescan every 30 s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument("--idle", type=float, default=60.0, help="idle seconds measured after the catch-up")
    ap.add_argument("--quick", action="store_true", help="smoke run: 64 MB, 10 s idle")
    args = ap.parse_args()
    if args.quick:
        args.size_mb, args.idle = 64, 10.0
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}, load average {os.getloadavg()[0]:.1f}")
    print(f"command: python {' '.join(sys.argv)}")
    with tempfile.TemporaryDirectory(prefix="bench-catchup-") as tmp:
        root = Path(tmp)
        src = root / "backlog.log"
        generate(str(src), args.size_mb * 1024 * 1024 // FILES, failures=50)
        logs = [root / "logs" / f"train_rank{i}.log" for i in range(FILES)]
        logs[0].parent.mkdir()
        for p in logs:
            p.write_text("")
        port = free_port()
        cfg = {"node": {"name": "n"}, "job": {"name": "j"}, "paths": {"state_dir": str(root / "state")},
               "http": {"listen": f"127.0.0.1:{port}"}, "logging": {"level": "warning"},
               "probes": {"logs": {"enabled": True, "sources": [{"name": "train", "paths": [str(root / "logs" / "*.log")]}]}}}
        (root / "c.yaml").write_text(json.dumps(cfg))
        proc = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "-c", str(root / "c.yaml")], cwd=str(REPO),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ps = psutil.Process(proc.pid)
            key = 'npu_watchdog_log_files_followed{source="train"}'
            wait_for(lambda: metrics(port).get(key) == FILES, timeout=60, what="files followed")
            time.sleep(5)
            idle_line = idle(ps, port, args.idle)
            data = src.read_bytes()
            total = len(data) * FILES
            c0 = sum(ps.cpu_times()[:2])
            for p in logs:
                with open(p, "ab") as fh:
                    fh.write(data)
            t_written = time.perf_counter()
            done = wait_for(lambda: metrics(port).get('npu_watchdog_log_bytes_read_total{source="train"}', 0) >= total
                            and time.perf_counter(), timeout=600, interval=0.02, what="backlog read")
            cpu = sum(ps.cpu_times()[:2]) - c0
            secs = done - t_written
            m = metrics(port)
            runs0 = m['npu_watchdog_probe_runs_total{probe="logs"}']
            print(f"backlog: {total / 1e6:.0f} MB in {FILES} files; read in {secs:.2f} s after the write ended: "
                  f"{total / 1e6 / secs:.0f} MB/s; daemon CPU {cpu:.2f} s ({total / 1e6 / max(cpu, 1e-9):.0f} MB per CPU s)")
            print(f"log rounds so far: {runs0:.0f}; matches: "
                  f"{sum(v for k, v in m.items() if k.startswith('npu_watchdog_log_matches_total')):.0f}")
            print(idle_line)
            print(f"SUMMARY catch-up {total / 1e6 / secs:.0f} MB/s (target >= 200): "
                  f"{'PASS' if total / 1e6 / secs >= 200 else 'MISS'}")
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())

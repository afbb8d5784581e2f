#!/usr/bin/env python3
"""Start-up: `--version` / `--help` time, and READY=1 after the first complete probe round.

    python bench/bench_startup.py            # 10 CLI runs each, 5 daemon starts
    python bench/bench_startup.py --quick    # 3 and 2
    python bench/bench_startup.py --discovery   # the daemon with discovery on, as shipped

CLI: wall and CPU time (the child's user+system from getrusage) of `npu-watchdog --version` and
`--help`, median and max, after byte-compiling the package (as installing it does). Daemon: started with a NOTIFY_SOCKET the script listens on (like
systemd), probes on 60 s intervals so only their first round runs; READY latency = arrival of
READY=1 minus the end of the last probe's first round (`last_run + last_duration_seconds` from
/api/status). Targets: CLI < 0.1 s; READY within 50 ms of the first complete round.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import List, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.helpers import free_port, http_get  # noqa: E402

ENTRY = str(Path(sys.executable).with_name("npu-watchdog"))


def cli_times(arg: str, n: int) -> Tuple[List[float], List[float]]:
    walls, cpus = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([ENTRY, arg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def ready_latency(tmp: Path, discovery: bool = False) -> Tuple[float, int]:
    """(READY arrival - end of the last first round) in seconds, and /healthz before READY."""
    sock_path = str(tmp / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    port = free_port()
    (tmp / "hb").mkdir(exist_ok=True)
    (tmp / "hb" / "rank0.json").write_text(json.dumps({"step": 1, "time": time.time()}))
    cfg = {"node": {"name": "n"}, "job": {"name": "j"}, "paths": {"state_dir": str(tmp / "state")},
           "http": {"listen": f"127.0.0.1:{port}"},
           "probes": {"jitter": "0s",
                      "heartbeat": {"enabled": True, "interval": "60s", "paths": [str(tmp / "hb" / "*.json")]},
                      "commands": [{"name": "slowish", "argv": ["/bin/sleep", "0.5"], "interval": "60s"}]}}
    if discovery:  # as shipped: the probes fed by discovery (it finds no job of its tag here)
        cfg["discovery"] = {"enabled": True, "only_env": f"NPU_WATCHDOG_BENCH=startup-{os.getpid()}"}
        cfg["probes"] = {"jitter": "0s", **{p: {"interval": "60s"} for p in ("process", "heartbeat", "logs")},
                         "commands": cfg["probes"]["commands"]}
    (tmp / "c.yaml").write_text(json.dumps(cfg))
    env = dict(os.environ, NOTIFY_SOCKET=sock_path)
    proc = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "-c", str(tmp / "c.yaml")], cwd=str(REPO),
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    early = 0
    deadline = time.monotonic() + 30
    try:
        sock.settimeout(0.02)
        while time.monotonic() < deadline:
            if not early:
                try:
                    early = http_get(f"http://127.0.0.1:{port}/healthz", timeout=0.2)[0]
                except OSError:
                    pass
            try:
                msg = sock.recv(4096).decode()
            except socket.timeout:
                continue
            if "READY=1" in msg:
                t_ready = time.time()
                break
        else:
            raise SystemExit("no READY=1 within 30 s")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5) as r:
            st = json.loads(r.read())
        ends = [p["last_run"] + p["last_duration_seconds"] for p in st["probes"]]
        return t_ready - max(ends), early
    finally:
        proc.terminate()
        proc.wait(10)
        sock.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--discovery", action="store_true",
                    help="the daemon starts with discovery on (as the shipped config) instead of a heartbeat probe")
    args = ap.parse_args()
    n_cli, n_daemon = (3, 2) if args.quick else (10, 5)
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M %Z')}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"command: python {' '.join(sys.argv)}")
    # Byte-compile first, as an installed package is: with PYTHONDONTWRITEBYTECODE set (some CI
    # and container images) every start would compile the sources again.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "watchdog")], check=True,
                   env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""))
    ok = True
    for arg in ("--version", "--help"):
        walls, cpus = cli_times(arg, n_cli)
        ok &= statistics.median(walls) < 0.1
        print(f"npu-watchdog {arg}: wall median {statistics.median(walls) * 1e3:.0f} ms, max {max(walls) * 1e3:.0f} ms; "
              f"CPU median {statistics.median(cpus) * 1e3:.0f} ms")
    lats = []
    for _ in range(n_daemon):
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            lat, early = ready_latency(Path(tmp), args.discovery)
            lats.append(lat)
            print(f"READY=1 {lat * 1e3:.1f} ms after the first complete round; /healthz before it: {early or 'n/a'}")
    ok &= max(lats) < 0.05
    print(f"SUMMARY cli<0.1s and READY<50ms: {'PASS' if ok else 'MISS'} (READY median "
          f"{statistics.median(lats) * 1e3:.1f} ms, max {max(lats) * 1e3:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

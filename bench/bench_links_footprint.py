#!/usr/bin/env python3
"""The idle footprint of the links and subhealth probes, before and after, in one run.

Two daemons run side by side on one simulated node (bench_footprint.py's node: rank processes,
the writer, the fake npu-smi), on the shipped example config at its shipped intervals:

- "before": the links and subhealth probes off (`probes.links.enabled`, `probes.subhealth.enabled`
  false), as the daemon was before them;
- "after": both on, with the fake hccn_tool on PATH and `probes.links.devices` the node's NPUs
  (the bench machine has no /dev/davinci<N>).

Both are measured the same way in the same windows (psutil): the daemon's own CPU seconds, the
CPU of the programs it ran and waited for (npu-smi, hccn_tool: the fakes are Python scripts, the
real tools are C binaries, so that column is an upper bound of what the real tools cost), and
RSS. A machine shared with other work affects both alike.

    python bench/bench_links_footprint.py                     # 8 NPUs, 10 windows of 60 s
    python bench/bench_links_footprint.py --windows 3 --window 30   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from bench_footprint import SHIPPED, machine, node_setup, scrape, stop_proc  # noqa: E402
from tests.helpers import free_port, wait_for  # noqa: E402

FAKES = REPO / "tests" / "fakes"


def config(root: Path, name: str, npus: int, on: bool) -> Path:
    cfg = yaml.safe_load(SHIPPED.read_text())
    cfg["node"] = {"name": f"bench-{name}"}
    cfg["paths"] = {"state_dir": str(root / f"state-{name}")}
    cfg["http"]["listen"] = f"127.0.0.1:{free_port()}"
    cfg["alerting"]["channels"] = []
    cfg["discovery"]["only_env"] = f"NPU_WATCHDOG_BENCH=bench-{os.getpid()}"
    cfg["probes"]["npu"] = {**(cfg["probes"].get("npu") or {}), "enabled": True}
    links = cfg["probes"].setdefault("links", {})
    sub = cfg["probes"].setdefault("subhealth", {})
    links["enabled"] = sub["enabled"] = on
    if on:
        links["devices"] = list(range(npus))
    path = root / f"config-{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class Daemon:
    def __init__(self, root: Path, name: str, cfg: Path, env: Dict[str, str]):
        self.name = name
        self.url = "http://" + yaml.safe_load(cfg.read_text())["http"]["listen"]
        self.log = open(root / f"daemon-{name}.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "-c", str(cfg)], cwd=str(REPO),
                                     env=env, stdout=self.log, stderr=self.log)
        self.ps = psutil.Process(self.proc.pid)
        self.rss_peak = 0

    def cpu(self) -> Dict[str, float]:
        t = self.ps.cpu_times()
        return {"own": t.user + t.system, "children": t.children_user + t.children_system}

    def rss(self) -> int:
        r = self.ps.memory_info().rss
        self.rss_peak = max(self.rss_peak, r)
        return r


def run(args: argparse.Namespace) -> int:
    print(machine())
    print(f"command: python {' '.join(sys.argv)}")
    root = Path(tempfile.mkdtemp(prefix="bench-links-"))
    node = node_setup(root, args.npus, args.npus, 1, 10.0)
    (root / "hccn.json").write_text(json.dumps({"devices": list(range(args.npus))}))
    bindir = root / "bin"
    bindir.mkdir()
    (bindir / "npu-smi").symlink_to(FAKES / "npu-smi")
    (bindir / "hccn_tool").symlink_to(FAKES / "hccn_tool")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", FAKE_NPU_SMI_SCENARIO=str(root / "npu.json"),
               FAKE_HCCN_TOOL_SCENARIO=str(root / "hccn.json"))
    daemons: List[Daemon] = []
    try:
        daemons = [Daemon(root, "before", config(root, "before", args.npus, False), env),
                   Daemon(root, "after", config(root, "after", args.npus, True), env)]
        for d in daemons:
            wait_for(lambda d=d: scrape(d.url + "/metrics"), timeout=60, interval=0.5, what=f"{d.name} up")
        time.sleep(args.settle)
        print(f"{'window':>6} " + " ".join(f"{d.name + ' own CPU s':>18} {d.name + ' tools CPU s':>19} "
                                           f"{d.name + ' RSS MB':>15}" for d in daemons))
        rows = []
        for i in range(args.windows):
            start = [d.cpu() for d in daemons]
            end = time.monotonic() + args.window
            while time.monotonic() < end:
                for d in daemons:
                    d.rss()
                time.sleep(min(5.0, max(0.0, end - time.monotonic())))
            row = []
            for d, s in zip(daemons, start):
                now = d.cpu()
                row.append((now["own"] - s["own"], now["children"] - s["children"], d.rss() / 1e6))
            rows.append(row)
            print(f"{i + 1:>6} " + " ".join(f"{a:>18.2f} {b:>19.2f} {c:>15.1f}" for a, b, c in row), flush=True)
        for j, d in enumerate(daemons):
            own = sum(r[j][0] for r in rows) / len(rows)
            kids = sum(r[j][1] for r in rows) / len(rows)
            print(f"{d.name}: mean per {args.window:g}s window: own CPU {own:.2f}s ({100 * own / args.window:.2f}% "
                  f"of a core), tools CPU {kids:.2f}s; peak RSS {d.rss_peak / 1e6:.1f} MB")
        with urllib.request.urlopen(daemons[1].url + "/api/status", timeout=10) as resp:
            st = json.loads(resp.read())
        print("after: " + ", ".join(f"{p['name']} {'up' if p['up'] else 'DOWN'} {p['runs_total']} rounds "
                                     f"({p['last_result']})" for p in st["probes"]
                                     if p["name"] in ("links", "subhealth", "npu")))
        return 0
    finally:
        for p in [d.proc for d in daemons] + node:
            stop_proc(p)
        for p in [d.proc for d in daemons] + node:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npus", type=int, default=8)
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--window", type=float, default=60.0, help="seconds per measured window")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after start before measuring")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark: memory and speed of the log matcher's stage 1 on RE2, exact against loosened.

Stage 1 finds the lines any rule may match with one combined RE2 pattern; stage 2 checks each
candidate with the rules' exact patterns. The shipped matcher widens the bounded repetitions of
the combined pattern (`.{0,200}` to `.*`, watchdog.logrules.matcher._loosened) and caps its
memory at 64 MB. This script builds both combined patterns from the shipped rules in one
process each (so one's freed memory cannot hide the other's) and reports, for each:

  - the RSS the compile adds,
  - the RSS the DFA cache adds while scanning every annotated sample line of tests/samples
    (the most varied failure and near-miss lines the project holds), `--rounds` times,
  - the CPU time of those scans and the number of candidate lines (equal: a prefilter),
  - the same with the memory budget the matcher used before (256 MB).

    python bench/bench_stage1_memory.py
    python bench/bench_stage1_memory.py --rounds 10
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def measure(mode: str, max_mem_mb: int, rounds: int) -> dict:
    """One configuration, in this process (run by `main` in a child process per configuration)."""
    import watchdog.daemon as daemon  # the daemon's own imports first, as in the daemon
    from watchdog.logrules import corpus
    from watchdog.logrules.matcher import _scoped, stage_one_re2
    from watchdog.logrules.model import build_ruleset

    assert daemon.__name__  # (loaded for its memory, not used)
    alternatives = [_scoped(p) for r in build_ruleset() for p in r.patterns]
    files = sorted(glob.glob(os.path.join(REPO, "tests", "samples", "*", "*.log")))
    data = b"\n".join(corpus.parse_annotated(open(f, encoding="utf-8").read(), f).data for f in files) + b"\n"
    before = _rss_mb()
    bulk = stage_one_re2(alternatives, loosen=mode == "loosened", max_mem=max_mem_mb << 20)
    compiled = _rss_mb()
    cpu, hits = time.process_time(), 0
    for _ in range(rounds):
        m = bulk.search(data, 0, len(data))
        while m is not None:
            hits += 1
            end = data.find(b"\n", m.start())
            m = bulk.search(data, end + 1, len(data)) if 0 <= end < len(data) - 1 else None
    cpu = time.process_time() - cpu
    return {"mode": mode, "max_mem_mb": max_mem_mb, "compile_mb": compiled - before, "dfa_mb": _rss_mb() - compiled,
            "scan_cpu_s": cpu, "candidates": hits // rounds, "data_kb": len(data) // 1024, "patterns": len(alternatives)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="scans of the sample lines per configuration")
    ap.add_argument("--quick", action="store_true", help="one scan per configuration (a smoke run)")
    ap.add_argument("--one", nargs=2, metavar=("MODE", "MAX_MEM_MB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.rounds)))
        return
    print(f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python bench/bench_stage1_memory.py --rounds {args.rounds}")
    results = {}
    for mode, mem in (("exact", 256), ("loosened", 256), ("loosened", 64), ("exact", 64)):
        out = subprocess.run([sys.executable, __file__, "--rounds", str(args.rounds), "--one", mode, str(mem)],
                             capture_output=True, text=True, check=True).stdout
        r = results[(mode, mem)] = json.loads(out.strip().splitlines()[-1])
        print(f"{r['mode']:9s} max_mem {r['max_mem_mb']:3d} MB: compile +{r['compile_mb']:.1f} MB, DFA +{r['dfa_mb']:.1f} MB "
              f"after {args.rounds} scans of {r['data_kb']} KB ({r['patterns']} patterns), scan CPU {r['scan_cpu_s']:.2f} s, "
              f"{r['candidates']} candidate lines per scan")
    shipped, before = results[("loosened", 64)], results[("exact", 256)]
    same = shipped["candidates"] == before["candidates"]
    smaller = shipped["compile_mb"] + shipped["dfa_mb"] < before["compile_mb"] + before["dfa_mb"]
    print(f"SUMMARY target: the shipped stage 1 (loosened, 64 MB) lets through the same lines in less memory than the "
          f"exact one: {'PASS' if same and smaller else 'MISS'} (candidates {shipped['candidates']} vs "
          f"{before['candidates']}, memory {shipped['compile_mb'] + shipped['dfa_mb']:.1f} vs "
          f"{before['compile_mb'] + before['dfa_mb']:.1f} MB)")


if __name__ == "__main__":
    main()

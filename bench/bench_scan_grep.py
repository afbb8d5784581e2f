#!/usr/bin/env python3
"""Benchmark: `npu-watchdog scan` (the CLI, start-up included) vs `LC_ALL=C grep -E -c` with the
same patterns on the same generated log, and both must count the same lines.

The log is the generator of `bench_logscan.py` (Megatron/HF/DeepSpeed/plog lines with a few
hundred failure lines and near misses mixed in). Every rule pattern is translated to POSIX ERE for
grep. Both commands run as subprocesses, alternately, `--rounds` times after one warm-up read of
the file; each round measures wall time and the child's CPU time. `scan --count` prints the
number of lines on which any rule matches (before thresholds), which is what `grep -c` counts:
the bench stops with an error when the two counts differ in any round. Rules with an `unless`
(a line that matches it is not reported) have no grep equivalent: both sides leave them out (scan
through a config's `probes.logs.disable`), and the header says how many. With `--check-re` (on by
default) the pure-Python engine scans the first `--re-mb` MB and must report the same events as
RE2 on the same bytes.

    python bench/bench_scan_grep.py                 # 300 MB, 3 rounds
    python bench/bench_scan_grep.py --size-mb 100 --rounds 5
    python bench/bench_scan_grep.py --quick         # 50 MB, 2 rounds, small re check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from bench_logscan import generate, to_ere  # noqa: E402
from watchdog.logrules.model import build_ruleset  # noqa: E402


def timed(cmd: list, env: dict) -> tuple:
    """(wall seconds, CPU seconds of the child, stdout) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({r.returncode}): {r.stderr.strip()[:500]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.stdout


def scan_cmd() -> list:
    exe = os.path.join(os.path.dirname(sys.executable), "npu-watchdog")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "watchdog"]


def check_engines(path: str, mb: int, tmp: str) -> str:
    """Events of the first `mb` MB (whole lines) with RE2 and with `re`: must be identical."""
    head = os.path.join(tmp, "head.log")
    with open(path, "rb") as src, open(head, "wb") as dst:
        data = src.read(mb * 1024 * 1024)
        dst.write(data[:data.rfind(b"\n") + 1])
    outs = {}
    for engine in ("re2", "re"):
        _, cpu, out = timed(scan_cmd() + ["scan", "--json", "--engine", engine, head], dict(os.environ))
        outs[engine] = (json.loads(out)["events"], cpu)
    if outs["re2"][0] != outs["re"][0]:
        raise SystemExit(f"engines disagree on the first {mb} MB: re2 {len(outs['re2'][0])} events, "
                         f"re {len(outs['re'][0])}")
    return (f"engines agree on the first {mb} MB: {len(outs['re2'][0])} events each "
            f"(re2 {outs['re2'][1]:.2f} CPU s, re {outs['re'][1]:.2f} CPU s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=300)
    ap.add_argument("--failures", type=int, default=400, help="failure lines to mix in (approx.)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--re-mb", type=int, default=20, help="MB scanned by both engines for --check-re")
    ap.add_argument("--no-check-re", dest="check_re", action="store_false")
    ap.add_argument("--keep", help="write/keep the generated log at this path")
    ap.add_argument("--quick", action="store_true", help="50 MB, 2 rounds, 5 MB engine check")
    args = ap.parse_args()
    if args.quick:
        args.size_mb, args.rounds, args.re_mb = 50, 2, 5
    tmp = tempfile.mkdtemp(prefix="bench-scan-grep-")
    try:
        path = args.keep or os.path.join(tmp, "train.log")
        size = args.size_mb * 1024 * 1024
        if not (args.keep and os.path.exists(path) and os.path.getsize(path) >= size):
            generate(path, size, args.failures)
        rules = build_ruleset()
        unless = [r.id for r in rules if r.unless]
        rules = tuple(r for r in rules if not r.unless)
        patterns = [to_ere(p) for r in rules for p in r.patterns]
        pfile = os.path.join(tmp, "patterns.txt")
        with open(pfile, "w") as fh:
            fh.write("\n".join(patterns) + "\n")
        cfile = os.path.join(tmp, "config.yaml")
        with open(cfile, "w") as fh:
            json.dump({"probes": {"logs": {"disable": unless}}}, fh)  # JSON is YAML
        env_c = dict(os.environ, LC_ALL="C")
        grep = ["grep", "-E", "-c", "-f", pfile, path]
        scan = scan_cmd() + ["scan", "--count", "-c", cfile, path]
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL)  # warm the page cache for both
        gv = subprocess.run(["grep", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        mb = os.path.getsize(path) / 1e6
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {gv}, "
              f"{time.strftime('%Y-%m-%d %H:%M %Z')}, load average {os.getloadavg()[0]:.1f}")
        print(f"command: {' '.join(sys.argv)}")
        print(f"file: {mb:.0f} MB, {len(patterns)} patterns from {len(rules)} rules "
              f"({len(unless)} rules with an `unless` left out of both)")
        print("| round | grep wall s | grep CPU s | scan wall s | scan CPU s | lines (both) | ratio wall | ratio CPU |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        walls, cpus = [], []
        for i in range(1, args.rounds + 1):
            gw, gc, gout = timed(grep, env_c)
            sw, sc, sout = timed(scan, env_c)
            if int(gout.strip() or 0) != int(sout.strip() or 0):
                raise SystemExit(f"round {i}: grep counts {gout.strip()} lines, scan {sout.strip()}")
            walls.append(gw / sw)
            cpus.append(gc / sc)
            print(f"| {i} | {gw:.2f} | {gc:.2f} | {sw:.2f} | {sc:.2f} | {int(sout)} | {gw / sw:.2f}x | {gc / sc:.2f}x |")
        if args.check_re:
            print(check_engines(path, args.re_mb, tmp))
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        print(f"SUMMARY scan vs LC_ALL=C grep -E (throughput, median of {args.rounds} rounds): wall {wall:.2f}x, "
              f"CPU {cpu:.2f}x; target >= 1x by wall: {'PASS' if wall >= 1 else 'MISS'}; identical counts: PASS")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

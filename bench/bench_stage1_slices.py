#!/usr/bin/env python3
"""Benchmark: stage 1's two paths per slice size, the reason for `BULK_MIN_BYTES`.

With `engine: auto` the log matcher searches a slice with the rules' literals (a lower-cased copy
and `bytes.find` per literal, Python's `re` for the rules without one) when the slice is shorter
than `watchdog.logrules.matcher.BULK_MIN_BYTES`, and with RE2's combined pattern from that size up,
RE2 being imported and compiled at the first such slice (it is 4 MB of resident memory a quiet
log never needs). This script times both paths on slices from 512 bytes to 1 MiB of two texts:
a training log (bench_logscan.py's generator: iteration lines, INFO chatter, plog INFO lines, a
failure line or near miss now and then: what a daemon reads) and the sample corpus (every annotated
line of tests/samples, annotations cut off: nearly every line a failure or a near miss, the worst
case for both). CPU time per slice, the median of `--rounds` passes over as many slices as fit in
2 MiB, and the ratio: where the literal path costs several times RE2's, RE2 is worth its memory.

    python bench/bench_stage1_slices.py
    python bench/bench_stage1_slices.py --rounds 9
    python bench/bench_stage1_slices.py --quick      # one pass, three sizes (a smoke run)
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from watchdog.logrules.corpus import load  # noqa: E402
from watchdog.logrules.matcher import BULK_MIN_BYTES, Matcher, re2_available  # noqa: E402
from watchdog.logrules.model import build_ruleset  # noqa: E402
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench_logscan import generate  # noqa: E402

SIZES = (512, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20)


def training_log(size: int = 4 << 20) -> bytes:
    with tempfile.NamedTemporaryFile(suffix=".log") as fh:
        generate(fh.name, size, failures=40)
        return open(fh.name, "rb").read()


def corpus() -> bytes:
    """Every annotated sample line, annotations cut off (as bench_stage1_memory.py reads them)."""
    files = sorted(glob.glob(os.path.join(REPO, "tests", "samples", "*", "*.log")))
    return b"".join(s.data for s in load(files))


def slices(data: bytes, size: int, budget: int = 2 << 20) -> list:
    out, pos = [], 0
    while len(out) * size < budget:
        if pos + size > len(data):
            pos = 0
        out.append(data[pos:pos + size])
        pos += size
    return out


def per_slice(m: Matcher, blocks: list, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.process_time()
        for b in blocks:
            m.candidates(b)
        times.append((time.process_time() - t) / len(blocks))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one pass, three slice sizes (a smoke run)")
    args = ap.parse_args()
    sizes = SIZES[::2] if args.quick else SIZES
    if args.quick:
        args.rounds = 1
    if not re2_available():
        raise SystemExit("google-re2 is not installed: nothing to compare")
    rules = build_ruleset()
    literal, re2 = Matcher(rules, "re"), Matcher(rules, "re2")
    print(f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python bench/bench_stage1_slices.py {'--quick' if args.quick else f'--rounds {args.rounds}'}")
    print(f"BULK_MIN_BYTES = {BULK_MIN_BYTES}")
    for name, data in (("training log", training_log()), ("sample corpus", corpus())):
        print(f"{name} ({len(data)} bytes):")
        print(f"{'slice':>9}  {'literal us':>11}  {'re2 us':>9}  {'literal/re2':>11}")
        for size in sizes:
            blocks = slices(data, size)
            a, b = per_slice(literal, blocks, args.rounds), per_slice(re2, blocks, args.rounds)
            print(f"{size:>9}  {a * 1e6:>11.1f}  {b * 1e6:>9.1f}  {a / b:>10.1f}x")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Benchmark: the tailer + every shipped log rule vs `grep -E -c` with the same patterns.

Generates a training-style log (default 1 GB: Megatron iteration lines, HF Trainer dicts, INFO
chatter, CANN plog INFO lines, with a few hundred failure lines and near misses mixed in), then in
one run measures
  1. the daemon's path: Tailer (8 MiB slices) -> Matcher/Extractor with all shipped rules;
  2. `grep -E -c -f patterns.txt` over the same file, the patterns translated to POSIX ERE;
and prints lines/s, MB/s, the throughput ratio (ours / grep) and our CPU seconds per GB.

    python bench/bench_logscan.py                 # 1 GB
    python bench/bench_logscan.py --size-mb 200   # smaller
    python bench/bench_logscan.py --engine re     # the pure-Python fallback engine
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from watchdog.logrules.extract import Extractor  # noqa: E402
from watchdog.logrules.matcher import Matcher  # noqa: E402
from watchdog.logrules.model import build_ruleset  # noqa: E402
from watchdog.logrules.tail import SourceSpec, Tailer  # noqa: E402

NORMAL = [
    " iteration {i:8d}/  500000 | consumed samples: {s:12d} | elapsed time per iteration (ms): 4247.9 | "
    "learning rate: 2.999E-04 | global batch size:   512 | lm loss: 2.{r:06d}E+00 | loss scale: 65536.0 | "
    "grad norm: 0.{r:03d} | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "{{'loss': 1.{r:04d}, 'grad_norm': 0.{r:03d}, 'learning_rate': 1.9e-05, 'epoch': 0.{r:02d}}}",
    "[2026-01-05 10:11:{sec:02d},{ms:03d}] [INFO] [logging.py:128:log_dist] [Rank 0] step={i}, skipped=0, "
    "lr=[0.0001], mom=[(0.9, 0.95)]",
    "[INFO] HCCL(69396,python3):2026-01-05-10:11:{sec:02d}.145.320 [op_base.cc:413][69396]Entry-HcclAllReduce:"
    "tag[AllReduce_{i}], count[{s}], dataType[fp16], op[sum], localRank[1]",
    "2026-01-05 10:11:{sec:02d},{ms:03d} - INFO - dataloader worker {r} prefetched batch {i}; infer shapes ok; "
    "room for 2 more; latency {ms} nanoseconds",
    "[WARNING] aclnnMatmul dispatch success. This warning log can be ignored.",
    "HCCL_CONNECT_TIMEOUT=1800 HCCL_EXEC_TIMEOUT=1836 ASCEND_GLOBAL_LOG_LEVEL=3",
]
FAILURES = [
    "{{'loss': nan, 'grad_norm': nan, 'learning_rate': 1.9e-05, 'epoch': 0.5}}",
    "RuntimeError: NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total capacity; "
    "10.24 GiB already allocated)",
    "EI0002: [PID: 13075] 2026-01-05-10:45:23.586.187 The wait execution of the Notify register times out.",
    "[ERROR] HCCL(69396,python3):2026-01-05-02:55:04.912.211 [task_exception_handler.cc:340][69396]"
    "server:10.0.0.1/5, Heartbeat Lost Occurred, Possible Reason: 1. Process has exited",
    "       Kernel task happen error, retCode=0x26, [aicore exception].[FUNC:PreCheckTaskErr]",
    "[2026-01-05 10:12:22,229] [INFO] [loss_scaler.py:184:update_scale] [deepspeed] OVERFLOW! Rank 0 "
    "Skipping step. Attempted loss scale: 512, reducing to 256",
    "Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n    main()\n"
    "RuntimeError: boom",
]


def generate(path: str, size: int, failures: int, seed: int = 7) -> int:
    rnd = random.Random(seed)
    every = max(1, size // 150 // max(1, failures))  # roughly: one failure per `every` lines
    lines = 0
    written = 0
    buf = []
    with open(path, "w") as fh:
        while written < size:
            i = lines
            if i % every == every - 1:
                text = rnd.choice(FAILURES)
            else:
                text = rnd.choice(NORMAL).format(i=i, s=i * 512, r=rnd.randrange(1000), sec=i % 60,
                                                 ms=rnd.randrange(1000))
            buf.append(text)
            written += len(text) + 1
            lines += 1
            if len(buf) >= 10000:
                fh.write("\n".join(buf) + "\n")
                buf = []
        if buf:
            fh.write("\n".join(buf) + "\n")
    return lines


def _ere_class(pattern: str, i: int, icase: bool) -> tuple:
    """The bracket expression starting at `pattern[i]` ("[") as POSIX ERE, and the index after it:
    inside brackets ERE has no escapes, so `\\]` goes first, `\\-` last, `\\\\` is one backslash,
    `\\d \\w \\s` become ranges and classes; `[^\\n]` (any character of a line) becomes `.`."""
    j, members, close, dash = i + 1, [], False, False
    negate = pattern.startswith("^", j)
    if negate:
        j += 1
    while j < len(pattern) and not (pattern[j] == "]" and (members or close or dash)):
        c = pattern[j]
        if c == "\\" and j + 1 < len(pattern):
            n = pattern[j + 1]
            if n == "]":
                close = True
            elif n == "-":
                dash = True
            elif n == "n":
                members.append("\n")
            else:
                members.append({"d": "0-9", "w": "A-Za-z0-9_", "s": "[:space:]", "\\": "\\"}.get(n, n))
            j += 2
            continue
        if c == "]" and not members:  # a `]` first in the class is a member
            close = True
        else:
            members.append(c)
        j += 1
    if negate and members == ["\n"] and not close and not dash:
        return ".", j + 1
    body = "".join(m for m in members if m != "\n")
    if icase:  # the other case of each letter and each letter range
        ranges = re.findall(r"[A-Za-z]-[A-Za-z]", body)
        singles = re.sub(r"[A-Za-z]-[A-Za-z]", "", body)
        body += "".join(r.swapcase() for r in ranges) + "".join(ch.swapcase() for ch in singles if ch.isalpha())
    return "[" + ("^" if negate else "") + ("]" if close else "") + body + ("-" if dash else "") + "]", j + 1


def to_ere(pattern: str) -> str:
    """Python/RE2 pattern (the subset the packs use) -> POSIX ERE for GNU grep: `(?:` and named
    groups `(?P<name>` become plain groups, a leading `(?i)` and a scoped `(?i:...)` spell each
    letter both ways (`[aA]`) inside their reach, `\\d \\w \\s` become classes, bracket expressions
    are rewritten to ERE's rules (`_ere_class`)."""
    icase = pattern.startswith("(?i)")
    if icase:
        pattern = pattern[4:]
    out = []
    i = 0
    groups: list = []  # per open group: whether it turned case-insensitivity on
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("(?i:", i):
            out.append("(")
            groups.append(not icase)
            icase = True
            i += 4
            continue
        if pattern.startswith("(?P<", i):
            out.append("(")
            groups.append(False)
            i = pattern.index(">", i) + 1
            continue
        if pattern.startswith("(?:", i):
            out.append("(")
            groups.append(False)
            i += 3
            continue
        if c == "[":
            text, i = _ere_class(pattern, i, icase)
            out.append(text)
            continue
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            rep = {"d": "[0-9]", "D": "[^0-9]", "w": "[A-Za-z0-9_]", "s": "[[:space:]]", "b": "\\b"}.get(n)
            out.append(rep if rep is not None else "\\" + n)
            i += 2
            continue
        if c == "(":
            groups.append(False)
        elif c == ")" and groups:
            if groups.pop():
                icase = False
        if icase and c.isalpha():
            out.append(f"[{c.lower()}{c.upper()}]")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def run_ours(path: str, engine: str) -> dict:
    rules = build_ruleset()
    ex = Extractor(Matcher(rules, engine=engine))
    tailer = Tailer([SourceSpec("bench", (path,), start="beginning")], None,
                    slice_bytes=8 << 20, round_bytes=1 << 40)
    events = []

    def consume(f, data, stop):
        events.extend(ex.feed(f.stream, data, time.time(), stop))

    c0, t0 = time.process_time(), time.perf_counter()
    tailer.poll(consume, time.time())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    st = tailer.stats["bench"]
    tailer.close()
    return {"wall": wall, "cpu": cpu, "lines": st.lines_total, "bytes": st.bytes_total,
            "matched_lines": sum(ex.matched.values()), "events": len(events), "engine": ex.matcher.engine}


def run_grep(path: str, patterns_file: str, locale: str = "") -> dict:
    """grep -E -c with the same patterns; `locale` sets LC_ALL (empty: the environment's)."""
    env = dict(os.environ)
    if locale:
        env["LC_ALL"] = locale
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(["grep", "-E", "-c", "-f", patterns_file, path], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 1):
        raise SystemExit(f"grep failed: {r.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "count": int(r.stdout.strip() or 0)}


def effective_locale() -> str:
    for var in ("LC_ALL", "LC_CTYPE", "LANG"):
        if os.environ.get(var):
            return os.environ[var]
    return "C (nothing set)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--failures", type=int, default=400, help="failure lines to mix in (approx.)")
    ap.add_argument("--engine", choices=("auto", "re2", "re"), default="auto")
    ap.add_argument("--keep", help="write/keep the generated log at this path")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-logscan-")
    try:
        path = args.keep or os.path.join(tmp, "train.log")
        size = args.size_mb * 1024 * 1024
        if not (args.keep and os.path.exists(path) and os.path.getsize(path) >= size):
            t0 = time.perf_counter()
            generate(path, size, args.failures)
            print(f"generated {os.path.getsize(path) / 1e6:.0f} MB in {time.perf_counter() - t0:.1f}s")
        patterns = [to_ere(p) for r in build_ruleset() for p in r.patterns]
        pfile = os.path.join(tmp, "patterns.txt")
        with open(pfile, "w") as fh:
            fh.write("\n".join(patterns) + "\n")
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL)  # warm the page cache for both
        grep_c = run_grep(path, pfile, "C")
        grep = run_grep(path, pfile)
        ours = run_ours(path, args.engine)
        mb = ours["bytes"] / 1e6
        gb = ours["bytes"] / 1e9
        ratio = grep["wall"] / ours["wall"]
        ratio_c = grep_c["wall"] / ours["wall"]
        ratio_c_cpu = grep_c["cpu"] / ours["cpu"]
        gv = subprocess.run(["grep", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {gv}, "
              f"{time.strftime('%Y-%m-%d %H:%M %Z')}, load average {os.getloadavg()[0]:.1f}")
        print(f"file: {mb:.0f} MB, {ours['lines']} lines, {len(patterns)} patterns from {len(build_ruleset())} rules")
        print(f"LC_ALL=C grep -E -c: {grep_c['wall']:.2f}s wall, {grep_c['cpu']:.2f}s CPU  "
              f"{grep_c['count']} matching lines  {mb / grep_c['wall']:.0f} MB/s")
        print(f"grep -E -c in the default locale ({effective_locale()}): {grep['wall']:.2f}s wall, "
              f"{grep['cpu']:.2f}s CPU  {grep['count']} matching lines  {mb / grep['wall']:.0f} MB/s")
        print(f"npu-watchdog ({ours['engine']}): {ours['wall']:.2f}s wall, {ours['cpu']:.2f}s CPU  "
              f"{ours['lines'] / ours['wall'] / 1e6:.2f} M lines/s  {mb / ours['wall']:.0f} MB/s  "
              f"{ours['matched_lines']} rule matches, {ours['events']} events after thresholds")
        print(f"ratio (ours/grep throughput, wall): vs LC_ALL=C grep {ratio_c:.2f}, vs default-locale grep "
              f"{ratio:.2f}; by CPU time vs LC_ALL=C grep {ratio_c_cpu:.2f}")
        print(f"CPU seconds per GB: {ours['cpu'] / gb:.2f}")
        print(f"SUMMARY engine={ours['engine']} target >= 1x LC_ALL=C grep -E: "
              f"{'PASS' if min(ratio_c, ratio_c_cpu) >= 1 else 'MISS'} (wall {ratio_c:.2f}x, CPU {ratio_c_cpu:.2f}x)")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

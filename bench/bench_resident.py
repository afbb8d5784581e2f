#!/usr/bin/env python3
"""Where the daemon's resident memory is: what each library adds on import, and what a running
daemon's memory maps hold.

The idle footprint target (RSS within 2.5x node_exporter's) is measured whole by
bench_footprint.py; this script says where the megabytes are, so that a change aims at the large
ones. Two parts:

  - imports: a fresh interpreter imports, in the daemon's own order, the standard modules and
    libraries the daemon loads and then the daemon itself, and prints the RSS each step adds.
    The order matters (a module shared by two libraries is counted once, at the first), so the
    same steps are printed in the order the daemon meets them;
  - maps (`--pid PID`, a running daemon): its `/proc/PID/smaps` grouped by mapping (the heap,
    anonymous memory, each shared library), resident kB per group, largest first.

    python bench/bench_resident.py
    python bench/bench_resident.py --pid "$(pgrep -f 'watchdog run' | head -1)"
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import subprocess
import sys
import time
from typing import Dict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The daemon's imports in the order a `run` meets them (stdlib first, then its libraries, then the
#: composition root and the daemon). Each step is one `import` in the same interpreter.
STEPS = [
    "typing", "dataclasses", "pathlib", "logging", "subprocess", "psutil", "yaml", "pydantic",
    "importlib.metadata", "watchdog.scheduling.aps", "sqlite3", "socketserver",
    "watchdog.config.schema", "watchdog.plugins_list", "watchdog.daemon", "watchdog.cli",
]

CHILD = r"""
import gc, importlib, sys, time
sys.path.insert(0, sys.argv[1])
def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
prev = rss()
print(f"{'(interpreter)':40s} {prev:7.2f} MB")
for name in sys.argv[2:]:
    n = len(sys.modules)
    importlib.import_module(name)
    gc.collect()
    now = rss()
    print(f"{name:40s} +{now - prev:6.2f} MB  {now:7.2f} MB  (+{len(sys.modules) - n} modules)")
    prev = now
"""


def imports() -> None:
    subprocess.run([sys.executable, "-c", CHILD, REPO, *STEPS], check=True)


def maps(pid: int) -> None:
    groups: Dict[str, int] = collections.Counter()
    current = "?"
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0] and not parts[0].endswith(":"):
                current = os.path.basename(parts[5]) if len(parts) > 5 else "anonymous"
            elif parts[0] == "Rss:":
                groups[current] += int(parts[1])
    total = sum(groups.values())
    print(f"resident {total} kB in {len(groups)} mapping groups")
    for name, kb in sorted(groups.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{kb:8d} kB  {name}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid", type=int, help="also group a running daemon's memory maps")
    ap.add_argument("--quick", action="store_true", help="accepted for `make bench`'s smoke runs (this script is quick)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python {' '.join(sys.argv)}")
    imports()
    if args.pid:
        maps(args.pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())

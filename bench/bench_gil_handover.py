#!/usr/bin/env python3
"""What rounds that run at once cost in GIL hand-overs (why probe rounds take turns).

Five threads each read 100 small /proc files (what a process or heartbeat round does), 50 times,
either all at once or one after the other in one thread; prints the process's CPU seconds and its
voluntary context switches (each a thread woken to take the GIL back). No daemon involved:

    python bench/bench_gil_handover.py          # both modes, twice each, alternating
    python bench/bench_gil_handover.py --quick  # 5 times instead of 50 (a smoke run)
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time

FILES = [f"/proc/{os.getpid()}/stat", "/proc/meminfo", "/proc/loadavg", f"/proc/{os.getpid()}/status"] * 25
THREADS, REPEATS = 5, 50


def work() -> None:
    for path in FILES:
        with open(path, "rb") as fh:
            fh.read()
        sum(i * i for i in range(200))  # a little Python work per read, as a parser does


def at_once() -> None:
    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def in_turn() -> None:
    t = threading.Thread(target=lambda: [work() for _ in range(THREADS)])
    t.start()
    t.join()


def measure(mode: str) -> str:
    run = at_once if mode == "at once" else in_turn
    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    for _ in range(REPEATS):
        run()
        time.sleep(0.01)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return (f"{mode:8s}  CPU {time.process_time() - c0:.3f} s  voluntary switches {r1.ru_nvcsw - r0.ru_nvcsw:7d}  "
            f"involuntary {r1.ru_nivcsw - r0.ru_nivcsw:6d}")


def main() -> int:
    global REPEATS
    if "--quick" in sys.argv[1:]:
        REPEATS = 5
    print(f"{THREADS} threads x {len(FILES)} reads, {REPEATS} times; Python {sys.version.split()[0]}, {os.cpu_count()} cores")
    for mode in ("at once", "in turn", "at once", "in turn"):
        print(measure(mode))
    return 0


if __name__ == "__main__":
    sys.exit(main())

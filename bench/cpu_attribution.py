#!/usr/bin/env python3
"""Runs the daemon (`python bench/cpu_attribution.py run -c CONFIG`) and attributes its CPU.

For finding where an idle daemon's CPU goes, by hand; used through bench_footprint.py:

    CPU_ATTRIBUTION_OUT=attribution.txt BENCH_DAEMON_PREFIX=bench/cpu_attribution.py \\
        .venv/bin/python bench/bench_footprint.py --size small --discovery --minutes 5

A sampling profiler misses a daemon that is busy for a millisecond every few seconds, and a
tracing one (cProfile, yappi) multiplies the cost of the pure-Python parts. This wraps a few
entry points instead (the probes' rounds, the discovery scan, the detector pass and its parts,
the engine's timer pass, the /metrics rendering) and adds up the calling thread's CPU time
(`time.thread_time`) in each: nested entries are included in their callers. The totals (and the
whole process's CPU since start, the CPU of each thread, and the cyclic collector's passes) are
written at exit and on SIGUSR1 to $CPU_ATTRIBUTION_OUT (default: cpu-attribution.txt), with
each detector's own time and the rules of any answer that kept a periodic pass from being skipped.
$CPU_ATTRIBUTION_PROFILE names entry points (labels below, comma-separated, e.g. "probe round: logs")
to run under cProfile as well, timed by the thread's CPU clock rather than the wall clock (a round
waiting for npu-smi is not busy), each written to $CPU_ATTRIBUTION_OUT.prof.txt.
"""

from __future__ import annotations

import atexit
import collections
import gc
import os
import re
import runpy
import signal
import sys
import threading
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ACC: Dict[str, List[float]] = collections.defaultdict(lambda: [0, 0.0])
GC: Dict[int, List[float]] = collections.defaultdict(lambda: [0, 0.0])


#: $CPU_ATTRIBUTION_PROFILE names labels (comma-separated, e.g. "probe round: logs") whose calls
#: run under cProfile; their statistics are written beside the totals (`<out>.prof.txt`).
PROFILED = {x.strip() for x in os.environ.get("CPU_ATTRIBUTION_PROFILE", "").split(",") if x.strip()}
PROFILE: Dict[str, Any] = {}


def wrap(owner: Any, attr: str, label: str) -> None:
    fn = getattr(owner, attr)
    if label in PROFILED:
        import cProfile
        profile = PROFILE[label] = cProfile.Profile(time.thread_time)  # CPU, not waiting
        plain = fn

        def fn(*args: Any, **kwargs: Any) -> Any:
            return profile.runcall(plain, *args, **kwargs)

    def attributed(*args: Any, **kwargs: Any) -> Any:
        t = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            count(label, t)

    setattr(owner, attr, attributed)


def count(label: str, started: float) -> None:
    """One call of `label`, which began at thread time `started`."""
    entry = ACC[label]
    entry[0] += 1
    entry[1] += time.thread_time() - started


def wrap_each_detector(detectors: Any) -> None:
    """Each detector's own CPU, under its name (`run_detectors` is called once per detector)."""
    fn = detectors.run_detectors

    def attributed(pairs: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.thread_time()
        try:
            return fn(pairs, *args, **kwargs)
        finally:
            count("detector: " + ",".join(name for name, _ in pairs), t)

    detectors.run_detectors = attributed


#: The rules of the answers that kept a periodic pass from being skipped (`Daemon._needless`).
HELD: Dict[str, int] = collections.Counter()


def wrap_last_findings(detectors: Any) -> None:
    fn = detectors.IncrementalDetectors.last_findings

    def counted(self: Any) -> Any:
        got = fn(self)
        for f in got:
            HELD[f"{f.rule} ({f.severity})"] += 1
        return got

    detectors.IncrementalDetectors.last_findings = counted


def install() -> None:
    import apscheduler.executors.debug as debug
    import watchdog.alerting.engine as engine
    import watchdog.daemon as daemon
    import watchdog.detectors as detectors
    import watchdog.discovery.feed as feed
    import watchdog.discovery.procfs as procfs
    import watchdog.metrics.collector as collector
    from watchdog.probes import command, discovered, heartbeat, logs, npu

    # The daemon's executor runs jobs in APScheduler's own thread (watchdog/scheduler.py).
    wrap(debug, "run_job", "scheduler job (a round's start, or the tick with its pass)")
    wrap(daemon.Daemon, "_periodic", "scheduler job: the periodic tick's detector pass")
    wrap(daemon.Daemon, "_after_round", "a round batch's detector pass")
    wrap(feed, "discover", "discovery scan")
    wrap(procfs.ProcTable, "read", "discovery scan: process table")
    wrap(daemon.Daemon, "evaluate", "detector pass")
    wrap(detectors.IncrementalDetectors, "run", "detector pass: detectors")
    wrap(detectors.IncrementalDetectors, "prepare", "detector pass: summaries")
    wrap_each_detector(detectors)
    wrap_last_findings(detectors)
    wrap(daemon, "evaluated_metrics", "detector pass: metrics")
    wrap(engine.AlertEngine, "process", "detector pass: alert engine")
    wrap(engine.AlertEngine, "tick", "alert engine timer pass")
    wrap(collector.WatchdogCollector, "render", "/metrics rendering")
    wrap(discovered.DiscoveredProcessProbe, "collect", "probe round: process (with its scan)")
    wrap(heartbeat.DiscoveredHeartbeatProbe, "collect", "probe round: heartbeat")
    wrap(npu.NpuProbe, "collect", "probe round: npu")
    wrap(logs.LogsProbe, "collect", "probe round: logs")
    wrap(command.CommandProbe, "collect", "probe round: command")


#: Threads that have ended (an HTTP request's, a send's): name with digits as N -> [count, CPU].
ENDED: Dict[str, List[float]] = collections.defaultdict(lambda: [0, 0.0])


def count_ended_threads() -> None:
    """A thread's own CPU, added up by name when it ends: /proc lists live threads only."""
    run = threading.Thread.run

    def counted(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            entry = ENDED[re.sub(r"[0-9]+", "N", self.name)]
            entry[0] += 1
            entry[1] += time.thread_time()

    threading.Thread.run = counted  # type: ignore[method-assign]


def dump(path: str, started: float) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    if PROFILE:
        import pstats
        with open(path + ".prof.txt", "w") as out:
            for label, profile in PROFILE.items():
                out.write(f"==== {label} (CPU time)\n")
                pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(45)
    with open(path, "w") as fh:
        fh.write(f"process CPU since start: {time.process_time() - started:.3f} s\n")
        for label, (n, s) in sorted(ACC.items(), key=lambda kv: -kv[1][1]):
            fh.write(f"{label:58s} calls {int(n):6d}  CPU {s:8.3f} s  per call {1000 * s / max(n, 1):7.3f} ms\n")
        for rule, n in sorted(HELD.items()):
            fh.write(f"answer that kept a periodic pass: {rule}: {n} times\n")
        for name, (n, s) in sorted(ENDED.items(), key=lambda kv: -kv[1][1]):
            fh.write(f"threads ended: {name:40s} {int(n):6d}  CPU {s:8.3f} s\n")
        for gen, (n, s) in sorted(GC.items()):
            fh.write(f"cyclic collector, generation {gen}: {int(n)} passes, {s:.3f} s\n")
        for tid in sorted(int(x) for x in os.listdir("/proc/self/task")):
            try:
                fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            fh.write(f"thread {tid} {names.get(tid, '?'):32s} CPU {(int(fields[11]) + int(fields[12])) / tick:.2f} s\n")


def main() -> None:
    started = time.process_time()
    out = os.environ.get("CPU_ATTRIBUTION_OUT", "cpu-attribution.txt")
    gc_started = [0.0]

    def on_gc(phase: str, info: Dict[str, Any]) -> None:
        if phase == "start":
            gc_started[0] = time.thread_time()
        else:
            GC[info["generation"]][0] += 1
            GC[info["generation"]][1] += time.thread_time() - gc_started[0]

    gc.callbacks.append(on_gc)
    count_ended_threads()
    install()
    signal.signal(signal.SIGUSR1, lambda *_: dump(out, started))
    atexit.register(dump, out, started)
    sys.argv = ["watchdog"] + sys.argv[1:]
    runpy.run_module("watchdog", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

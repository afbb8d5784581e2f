"""The CPU cost of writing one `/metrics` answer: the daemon's own renderer against
prometheus-client's (text format 0.0.4 and OpenMetrics) and gzip, on the same samples.

Run by hand: `python bench/bench_exposition.py [--quick] [--reps 200]`. Needs prometheus-client
(a test dependency, not a runtime one: docs/architecture.md says why). In-process, no daemon:
every metric of the table gets the label sets a node of each size has (small: 8 ranks of one job,
8 NPUs, 2 log sources; scale: 64 ranks in 2 jobs, 16 NPUs, 20 log sources), so both renderers
write the same series; the sampling itself (reading cached state) is the same for both and left
out. Prints the median CPU time (thread time) per answer and the body size of each variant,
and a SUMMARY against the budget of docs/benchmarks.md ("/metrics CPU per scrape <= node_exporter's",
node_exporter measured at 5.25-6.50 ms per scrape by `bench_footprint.py`).
"""

from __future__ import annotations

import argparse
import os
import gzip
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_idle import machine, print_machine  # noqa: E402
from watchdog.metrics.catalog import MetricDef, all_metrics  # noqa: E402
from watchdog.metrics.collector import WatchdogCollector  # noqa: E402

Sample = Tuple[str, Dict[str, str], float]
SIZES = {"small": {"jobs": 1, "ranks": 8, "npus": 8, "sources": 2},
         "scale": {"jobs": 2, "ranks": 64, "npus": 16, "sources": 20}}
#: node_exporter's CPU per scrape in docs/benchmarks.md (bench_footprint.py, the lower end).
NODE_EXPORTER_MS = 5.25


def label_sets(d: MetricDef, size: Dict[str, int]) -> List[Dict[str, str]]:
    """The label sets a node of `size` has for metric `d` (one per rank, chip, source, ...)."""
    names = set(d.labels)
    if {"rank", "training_job"} <= names:
        per_job = size["ranks"] // size["jobs"]
        base = [{"training_job": f"job{j}", "rank": str(r)} for j in range(size["jobs"]) for r in range(per_job)]
    elif {"npu", "chip"} <= names:
        base = [{"npu": str(n), "chip": "0"} for n in range(size["npus"])]
    elif "source" in names:
        base = [{"source": f"log{i}"} for i in range(size["sources"])]
    elif "training_job" in names:
        base = [{"training_job": f"job{j}"} for j in range(size["jobs"])]
    else:
        base = [{}]
    out = []
    for b in base:
        labels = dict(b)
        for name in d.labels:
            labels.setdefault(name, f"{name}-value")
        out.append(labels)
    return out


def samples_for(size: Dict[str, int]) -> List[Sample]:
    out: List[Sample] = []
    for i, d in enumerate(all_metrics()):
        for j, labels in enumerate(label_sets(d, size)):
            out.append((d.name, labels, float(i * 1000 + j) + 0.5))
    return out


class _Module:
    """Stands in for the feature modules: yields the prepared samples."""

    __name__ = "bench"

    def __init__(self, samples: List[Sample]):
        self._samples = samples

    def samples(self, runtime: Any) -> Iterable[Sample]:
        return self._samples


def ours(samples: List[Sample]) -> Callable[[], bytes]:
    col = WatchdogCollector(None)
    col._modules = [_Module(samples)]
    return col.render


def through_client(samples: List[Sample], openmetrics: bool) -> Callable[[], bytes]:
    """prometheus-client's way: a custom collector builds the families on every scrape, the
    registry's exposition writes them."""
    from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
    if openmetrics:
        from prometheus_client.openmetrics.exposition import generate_latest
    else:
        from prometheus_client.exposition import generate_latest
    defs = {d.name: d for d in all_metrics()}

    class Collector:
        def collect(self) -> Iterable[Any]:
            fams: Dict[str, Any] = {}
            for name, d in defs.items():
                cls = CounterMetricFamily if d.type == "counter" else GaugeMetricFamily
                fams[name] = cls(name, d.help, labels=sorted(d.labels))
            for name, labels, value in samples:
                fam = fams[name]
                fam.add_metric([labels[k] for k in sorted(labels)], value)
            return fams.values()

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collector())
    return lambda: generate_latest(reg)


def gzipped(render: Callable[[], bytes], level: int) -> Callable[[], bytes]:
    return lambda: gzip.compress(render(), compresslevel=level)


def cpu_ms(fn: Callable[[], bytes], reps: int) -> Tuple[float, int]:
    fn()  # warm-up
    times = []
    size = 0
    for _ in range(reps):
        t0 = time.thread_time()
        size = len(fn())
        times.append(time.thread_time() - t0)
    return statistics.median(times) * 1e3, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="30 answers per variant")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    reps = 30 if args.quick else args.reps
    print_machine(machine())
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    worst = 0.0
    for size_name, size in SIZES.items():
        samples = samples_for(size)
        base = ours(samples)
        variants = [
            ("ours, text 0.0.4", base),
            ("ours + gzip level 1", gzipped(base, 1)),
            ("ours + gzip level 6", gzipped(base, 6)),
            ("prometheus-client, text 0.0.4", through_client(samples, False)),
            ("prometheus-client, OpenMetrics", through_client(samples, True)),
            ("prometheus-client, OpenMetrics + gzip 6", gzipped(through_client(samples, True), 6)),
        ]
        print(f"\n{size_name}: {len(samples)} series of {len(all_metrics())} metrics, median of {reps}")
        print("| variant | CPU ms per answer | body bytes |\n|---|---:|---:|")
        for name, fn in variants:
            ms, nbytes = cpu_ms(fn, reps)
            print(f"| {name} | {ms:.2f} | {nbytes} |")
            if name.startswith("prometheus-client"):
                worst = max(worst, ms)
    verdict = "PASS" if worst <= NODE_EXPORTER_MS else "MISS"
    print(f"\nSUMMARY exposition through prometheus-client: worst {worst:.2f} ms per answer (rendering only) "
          f"against node_exporter's whole scrape {NODE_EXPORTER_MS} ms: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

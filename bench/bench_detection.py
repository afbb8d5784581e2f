"""Detection latency per fault scenario at the daemon's default settings, against the anchors.

Run by hand (`make bench`, or `python bench/bench_detection.py [--quick] [--repeat N] [--keep DIR]`).
Nothing here is shortened: the daemon runs with its shipped defaults for every threshold, probe
interval (10 s, 1 s jitter), `for` delay and the 2 s alert group window. The config sets only
what a deployment must: paths (state dir, heartbeat files, log sources of kind training and
plog), how to recognise the ranks (command line `watchdog.demo.rank`, launcher
`watchdog.demo.launcher`), the npu probe's npu-smi (the fake one of tests/fakes, on a private
PATH) and one `webhook` channel pointing at a local receiver.

The node is watchdog.demo.node.SimulatedNode: 8 real rank processes under a torchrun-like
launcher, writing heartbeats (contrib/heartbeat), a Megatron-style training log and CANN plog
files, and the fake npu-smi following what the ranks do. Each scenario gets a fresh daemon (new
state dir), waits until every probe has run twice with nothing firing, waits a random 0-10 s (so
the fault lands anywhere in the probes' 10 s cycle), then injects:

- nan: a Megatron iteration line with `lm loss: NAN` appended to rank 0's training log;
- oom: torch_npu's `RuntimeError: NPU out of memory ...` traceback appended to rank 3's log;
- hccl: CANN's EI0002 notify-wait timeout line appended to rank 2's plog file;
- dead_rank: rank 6 is SIGKILLed (the launcher reaps it);
- stall: every rank hangs (no steps, no heartbeats, no log lines, idle devices). The reference
  time is the last progress: the newest heartbeat / training-log write after the hang began.

Measured per scenario: detected (the finding first shows in /api/status, polled every 0.25 s)
and delivered (the webhook copy reaches the receiver), both from the fault (or last progress).
Targets (issue spec): stall delivered < 3 min after the last progress; a NaN/OOM/HCCL log line
delivered < 10 s after it was written; a dead rank < 15 s after the kill. Anchors: Huawei MindCluster's hang
rule ~5 min, DLRover 5-10 min, HCCL's own timeout ~30 min.

`--quick` runs only the three log scenarios (about 3 minutes); the full run takes about 8.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_idle import machine, print_machine  # noqa: E402
from tests.helpers import Daemon, http_get  # noqa: E402
from watchdog.config.schema import Config  # noqa: E402
from watchdog.demo.node import SimulatedNode  # noqa: E402
from watchdog.demo.receiver import Receiver  # noqa: E402

GROUP_WINDOW = 2.0  # the shipped default of alerting.group_window (checked against the schema below)
ANCHORS = "MindCluster hang rule ~5 min, DLRover 5-10 min, HCCL's own timeout ~30 min (HCCL_EXEC_TIMEOUT 1800 s)"


@dataclass
class Scenario:
    name: str
    rule: str  # the alert the on-call person must get
    what: str
    target: float  # seconds from fault / last progress to delivery
    target_text: str
    inject: Callable[["Bench"], float]  # returns the reference time (fault or last progress)
    budget: float  # give up after this long
    restart_job_after: bool = False


@dataclass
class Result:
    scenario: Scenario
    ref: float
    ref_kind: str
    detected: Optional[float] = None
    delivered: Optional[float] = None
    other_rules: List[str] = field(default_factory=list)
    log_excerpt: List[str] = field(default_factory=list)

    def dt(self, t: Optional[float]) -> Optional[float]:
        return None if t is None else t - self.ref

    @property
    def ok(self) -> bool:
        d = self.dt(self.delivered)
        return d is not None and d < self.scenario.target


# -- config: the shipped defaults, plus only what a deployment must set ---------------------------
def default_config(node: SimulatedNode, state: Path, receiver_url: str) -> Dict[str, Any]:
    r = node.root
    return {
        "node": {"name": "bench-node"},
        "job": {"name": "bench-job"},
        "paths": {"state_dir": str(state)},
        "probes": {
            # Scoped to this node's folder: simulated nodes of other runs on the machine are not ours.
            "process": {"enabled": True, "cmdline": r"watchdog\.demo\.rank " + re.escape(str(r)) + r"( |$)",
                        "parent": r"watchdog\.demo\.launcher " + re.escape(str(r)) + r"( |$)"},
            "heartbeat": {"enabled": True, "paths": [f"{r}/hb/rank*.json"]},
            "npu": {"enabled": True, "npu_smi": node.npu_smi},
            "logs": {"enabled": True, "sources": [
                {"name": "train", "paths": [f"{r}/logs/rank*.log"], "kind": "training"},
                {"name": "plog", "paths": [f"{r}/plog/plog-*.log"], "kind": "plog"},
            ]},
        },
        "alerting": {"channels": [{"type": "webhook", "name": "bench", "url": f"{receiver_url}/hook"}]},
    }


def describe_defaults(cfg: Dict[str, Any]) -> str:
    c = Config.model_validate(cfg)
    p = c.probes
    assert float(c.alerting.group_window) == GROUP_WINDOW, "group_window default changed: update GROUP_WINDOW"
    return (f"intervals process/heartbeat/npu/logs {p.process.interval:g}/{p.heartbeat.interval:g}/"
            f"{p.npu.interval:g}/{p.logs.interval:g} s, jitter {p.jitter:g} s; stall.duration {c.stall.duration:g} s; "
            f"heartbeat stale (train) {p.heartbeat.stale_after.train:g} s; group_window {c.alerting.group_window:g} s; "
            f"default_for {c.alerting.default_for:g} s")


# -- the faults ----------------------------------------------------------------------------------
def append_line(path: Path, text: str) -> float:
    """Append in one write (O_APPEND), like a logger flushing one record; returns the time written."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        t = time.time()
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return t


def inject_nan(b: "Bench") -> float:
    line = (f"{time.strftime('%Y-%m-%d %H:%M:%S')} | iteration    4242/ 100000 | lm loss: NAN | grad norm: nan | "
            "loss scale: 65536.0 | number of skipped iterations:   0 | number of nan iterations:   1 | "
            "tokens/s: 3391\n")
    return append_line(b.node.root / "logs" / "rank0.log", line)


def inject_oom(b: "Bench") -> float:
    text = ("Traceback (most recent call last):\n"
            '  File "pretrain_gpt.py", line 412, in <module>\n'
            "    loss = model(batch)\n"
            "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 3; 60.97 GiB total capacity; "
            "57.80 GiB already allocated; 57.80 GiB current active; 1.02 GiB free; 59.60 GiB reserved in total "
            "by PyTorch)\n")
    return append_line(b.node.root / "logs" / "rank3.log", text)


def inject_hccl(b: "Bench") -> float:
    pid = b.node.rank_pids()[2]
    plog = sorted((b.node.root / "plog").glob(f"plog-{pid}_*.log"))[-1]
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S") + ".123.456"
    line = (f"[ERROR] HCCL({pid},python3):{stamp} [transport.cc:412][{pid + 17}]EI0002: The wait execution of the "
            "Notify register times out. Reason: The Notify register has not received the Notify record from "
            "remote rank: [5].\n")
    return append_line(plog, line)


def inject_dead_rank(b: "Bench") -> float:
    pid = b.node.rank_pids()[6]
    t = time.time()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while 6 in b.node.rank_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    b.node.refresh()  # the fake npu-smi no longer lists the dead rank's process
    return t


def last_progress_write(root: Path) -> float:
    files = list((root / "hb").glob("rank*.json")) + list((root / "logs").glob("rank*.log"))
    return max(f.stat().st_mtime for f in files)


def inject_stall(b: "Bench") -> float:
    b.node.set_mode("hang")
    # Progress stops within one step (0.5 s); take the newest heartbeat / training-log write once
    # nothing has been written for 5 s.
    last = last_progress_write(b.node.root)
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 5.0:
        time.sleep(0.25)
        now = last_progress_write(b.node.root)
        if now != last:
            last, quiet_since = now, time.monotonic()
    return last


SCENARIOS = [
    # Targets: a log-visible failure pages within 10 s of the line, a dead rank within 15 s.
    Scenario("nan", "log_nan", "NaN loss line in rank 0's training log", 10, "< 10 s",
             inject_nan, budget=120),
    Scenario("oom", "log_oom", "NPU OOM traceback in rank 3's training log", 10, "< 10 s",
             inject_oom, budget=120),
    Scenario("hccl", "log_hccl", "HCCL EI0002 notify-wait timeout in rank 2's plog", 10,
             "< 10 s", inject_hccl, budget=120),
    Scenario("dead_rank", "rank_missing", "rank 6 SIGKILLed", 15, "< 15 s",
             inject_dead_rank, budget=120, restart_job_after=True),
    Scenario("stall", "stall", "every rank hangs (collective hang)", 180, "< 3 min", inject_stall, budget=420,
             restart_job_after=True),
]


# -- running ---------------------------------------------------------------------------------------
class Bench:
    def __init__(self, root: Path, seed: int):
        self.root = root
        self.node = SimulatedNode(root / "node")
        self.receiver = Receiver(out=open(os.devnull, "w"), echo=False)
        self.rng = random.Random(seed)
        self.daemon: Optional[Daemon] = None
        self.runs = 0

    def findings(self) -> List[Dict[str, Any]]:
        assert self.daemon is not None
        code, body = http_get(self.daemon.url + "/api/status", timeout=5)
        return json.loads(body).get("findings", []) if code == 200 else []

    def fire_messages_since(self, t: float) -> List[Dict[str, Any]]:
        out = []
        for rec in self.receiver.hooks():
            if rec.at >= t:
                for a in rec.body.get("alerts", []):
                    if a.get("status") == "firing":
                        out.append({**a, "_at": rec.at})
        return out

    def start_daemon(self) -> None:
        self.runs += 1
        d = self.root / f"daemon-{self.runs}"
        d.mkdir()
        self.daemon = Daemon(d, default_config(self.node, d / "state", self.receiver.url), env=self.node.env()).start()

    def warm_up(self, timeout: float = 120.0) -> None:
        """Every probe has run twice, every rank is seen, nothing is pending or firing."""
        assert self.daemon is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.daemon.alive()
            st = self.daemon.status()
            runs = {p["name"]: p["runs_total"] for p in st["probes"]}
            if (all(runs.get(n, 0) >= 2 for n in ("process", "heartbeat", "npu", "logs"))
                    and not st["findings"] and all(p["up"] for p in st["probes"])):
                return
            time.sleep(0.5)
        raise RuntimeError(f"daemon did not settle within {timeout:g} s: findings "
                           f"{[f['rule'] for f in self.daemon.status()['findings']]}")

    def run(self, sc: Scenario) -> Result:
        self.node.start_job()
        self.start_daemon()
        assert self.daemon is not None
        try:
            self.warm_up()
            time.sleep(self.rng.uniform(0.0, 10.0))
            t_inject = time.time()
            ref = sc.inject(self)
            res = Result(sc, ref, "last progress" if sc.name == "stall" else "fault")
            deadline = time.monotonic() + sc.budget
            while time.monotonic() < deadline:
                now = time.time()
                if res.detected is None and any(f["rule"] == sc.rule for f in self.findings()):
                    res.detected = now
                got = [a for a in self.fire_messages_since(t_inject) if a["labels"].get("alertname") == sc.rule]
                if got:
                    res.delivered = min(a["_at"] for a in got)
                    if res.detected is None:
                        res.detected = res.delivered
                    break
                time.sleep(0.25)
            res.other_rules = sorted({a["labels"].get("alertname", "?") for a in self.fire_messages_since(t_inject)}
                                     - {sc.rule})
            res.log_excerpt = [l for l in self.daemon.log().splitlines()
                               if re.search(rf"\b{re.escape(sc.rule)}\b|notification|sent|deliver", l)][:12]
            return res
        finally:
            self.daemon.stop()
            self.daemon = None
            if sc.restart_job_after:
                self.node.stop_job()
                self.node.set_mode("train")
                self.node.clear_devices()

    def close(self) -> None:
        try:
            if self.daemon is not None:
                self.daemon.stop()
        finally:
            self.node.stop_job()
            self.receiver.close()


def fmt(t: Optional[float]) -> str:
    if t is None:
        return "-"
    return f"{t:.1f} s" if t < 90 else f"{t:.1f} s ({t / 60:.2f} min)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the three log scenarios (nan, oom, hccl)")
    ap.add_argument("--only", nargs="+", choices=[s.name for s in SCENARIOS], help="run these scenarios")
    ap.add_argument("--repeat", type=int, default=1, help="runs per scenario (default 1)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the random 0-10 s injection offsets")
    ap.add_argument("--keep", type=Path, default=None, help="keep node files and daemon logs in this folder")
    args = ap.parse_args()
    chosen = [s for s in SCENARIOS if (args.only and s.name in args.only)
              or (not args.only and (not args.quick or s.rule.startswith("log_")))]
    seed = args.seed if args.seed is not None else int(time.time())
    m = machine()
    print_machine(m)
    print(f"loadavg at start: {Path('/proc/loadavg').read_text().split()[:3]}; seed {seed}")

    root = args.keep if args.keep else Path(tempfile.mkdtemp(prefix="npuwd-bench-detect-"))
    root.mkdir(parents=True, exist_ok=True)
    bench = Bench(root, seed)
    results: List[Result] = []
    try:
        print("daemon defaults:", describe_defaults(default_config(bench.node, root / "x", bench.receiver.url)))
        for sc in chosen:
            for i in range(args.repeat):
                print(f"--- {sc.name}: {sc.what} (run {i + 1}/{args.repeat}) ...", flush=True)
                r = bench.run(sc)
                results.append(r)
                print(f"    detected {fmt(r.dt(r.detected))}, delivered {fmt(r.dt(r.delivered))} after the "
                      f"{r.ref_kind}; target {sc.target_text}: {'PASS' if r.ok else 'MISS'}"
                      + (f"; also delivered: {', '.join(r.other_rules)}" if r.other_rules else ""), flush=True)
                if not r.ok:
                    print("    daemon log:\n      " + "\n      ".join(r.log_excerpt))
    finally:
        bench.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    print(f"\nat default settings (group window {GROUP_WINDOW:g} s); anchors: {ANCHORS}")
    head = f"{'scenario':<11}{'rule':<14}{'from':<15}{'detected':>20}{'delivered':>22}  {'target':<14}result"
    print(head)
    for r in results:
        print(f"{r.scenario.name:<11}{r.scenario.rule:<14}{r.ref_kind:<15}{fmt(r.dt(r.detected)):>20}"
              f"{fmt(r.dt(r.delivered)):>22}  {r.scenario.target_text:<14}{'PASS' if r.ok else 'MISS'}")
    if args.repeat > 1:
        for sc in chosen:
            ds = [r.dt(r.delivered) for r in results if r.scenario is sc and r.delivered is not None]
            if ds:
                print(f"  {sc.name}: delivered median {statistics.median(ds):.1f} s, max {max(ds):.1f} s over {len(ds)} runs")
    missed = [r.scenario.name for r in results if not r.ok]
    print("\nSUMMARY detection: " + ", ".join(f"{r.scenario.name} {fmt(r.dt(r.delivered))}" for r in results)
          + f"; targets {'all PASS' if not missed else 'MISS: ' + ', '.join(missed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

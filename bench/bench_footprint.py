#!/usr/bin/env python3
"""Side by side: the daemon and Debian's prometheus-node-exporter on one simulated node.

Both run at once on the same machine, are scraped every 15 s like one Prometheus would, and are
measured the same way (psutil): the process's own CPU seconds per window (the daemon's children,
i.e. the fake npu-smi, are excluded: the real tool is a C binary), RSS, the thread count (sampled
with the RSS), and the CPU of one /metrics scrape (a burst of scrapes at the end). Ratios are daemon / node_exporter, measured in
the same run, so a machine shared with other work affects both.

    python bench/bench_footprint.py --size small            # 8 ranks, 8 NPUs, 1 log, 10 min
    python bench/bench_footprint.py --size scale            # 64 ranks, 16 NPUs, 20 logs
    python bench/bench_footprint.py --size small --compress 10 --minutes 12   # "2 h" compressed
    python bench/bench_footprint.py --size scale --discovery   # the shipped config: discovery, 2 jobs

`--compress K` divides every probe interval, the state history, every detector window and the
scrape interval by K (the writers write K times as often), so K x the run's length of history
accumulates: with K=10, 12 minutes hold as many samples as 2 hours. The windows are then 300/K s
long, and the cost of the last window against the second one shows whether the cost grows with
the history. What runs besides the two measured processes: one writer process (heartbeat files
of every rank every 10 s, one training-log line per log every 10 s), one `sleep` process per rank
(RANK in its environment, found through a pid file), and the fake npu-smi (tests/fakes).

`--chatty R` adds what a progress bar writes (tqdm's default: a refresh every 0.1 s) to every
training log: R short lines a second, beside the one iteration line every 10 s. An idle daemon's
cost then includes reading a log that is written all the time, as most training logs are.

`--discovery` runs the shipped example config (discovery on, without its channels) instead: the
ranks are started by one launcher process per job (1 job small, 2 at scale) with the environment
a launcher gives them (RANK, LOCAL_RANK, WORLD_SIZE, the job name, NPU_WATCHDOG_HEARTBEAT), the
logs are their stdout files, and the daemon finds all of it from /proc every process round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Tuple

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.helpers import free_port, wait_for  # noqa: E402

FAKE_NPU_SMI = str(REPO / "tests" / "fakes" / "npu-smi")
NODE_EXPORTER = "prometheus-node-exporter"
SHIPPED = REPO / "config" / "npu-watchdog.example.yaml"
SIZES = {"small": (8, 8, 1), "scale": (64, 16, 20)}  # ranks, NPUs, logs

WRITER = r"""
import json, os, sys, time
spec, every = json.load(open(sys.argv[1])), float(sys.argv[2])
outs = [open(p, "a", buffering=1) for p in spec["logs"]]
step = 0
while True:
    step += 1
    now = time.time()
    for p, rank, pid in zip(spec["hb"], spec["ranks"], spec["pids"]):
        with open(p + ".tmp", "w") as fh:
            json.dump({"step": step, "time": now, "loss": 2.0 + 1.0 / step, "grad_norm": 1.1,
                       "loss_scale": 65536.0, "tokens_per_s": 3100.0, "phase": "train", "rank": rank,
                       "pid": pid}, fh)
        os.replace(p + ".tmp", p)
    for fh in outs:
        fh.write("%s | iteration %7d/ 100000 | lm loss: %.6E | loss scale: 65536.0 | grad norm: 1.100 |\n"
                 % (time.strftime("%Y-%m-%d %H:%M:%S"), step, 2.0 + 1.0 / step))
    time.sleep(every)
"""

#: A progress bar's output, R lines a second into every log (`--chatty R`).
CHATTER = r"""
import sys, time
paths, rate = sys.argv[2:], float(sys.argv[1])
outs = [open(p, "a", buffering=1) for p in paths]
n = 0
while True:
    n += 1
    for fh in outs:
        fh.write("Training: %3d%%|%-20s| %d/100000 [%d it/s, loss=2.1]\n" % (n // 1000 % 100, "#" * (n % 20), n, rate))
    time.sleep(1.0 / rate)
"""

#: One discovered job's launcher (a custom one, like a site's own script): starts its ranks
#: (`sleep`) with the environment a real launcher gives them, stdout of the first ones in a log
#: file, and writes their pids. Discovery finds the job from /proc alone.
LAUNCHER = r"""
import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
n = len(spec["ranks"])
procs = []
for i, r in enumerate(spec["ranks"]):
    env = dict(os.environ, RANK=str(r["rank"]), LOCAL_RANK=str(i), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
               NPU_WATCHDOG_JOB=spec["job"], NPU_WATCHDOG_HEARTBEAT=r["hb"])
    out = open(r["log"], "ab") if r["log"] else subprocess.DEVNULL
    procs.append(subprocess.Popen(["sleep", "1000000"], env=env, stdout=out))
with open(spec["pids"] + ".tmp", "w") as fh:
    fh.write("".join("%d\n" % p.pid for p in procs))
os.replace(spec["pids"] + ".tmp", spec["pids"])
for p in procs:
    p.wait()
"""


def machine() -> str:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"machine: {os.cpu_count()} cores, {model}, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d %H:%M %Z')}, load average {load}")


def node_setup(root: Path, ranks: int, npus: int, logs: int, every: float,
               jobs: int = 0, tag: str = "", chatty: float = 0.0) -> List[subprocess.Popen]:
    """The simulated node: rank processes, the writer, the fake npu-smi scenario. With `jobs`, the
    ranks are split into that many jobs, each started by its own launcher with the environment
    discovery reads (their heartbeat files and logs named there), `tag` in their environment."""
    for d in ("hb", "logs", "state"):
        (root / d).mkdir(parents=True, exist_ok=True)
    hb = [str(root / "hb" / f"rank{r}.json") for r in range(ranks)]
    log_paths = [str(root / "logs" / f"train_rank{i}.log") for i in range(logs)]
    if jobs:
        procs, pids = start_jobs(root, ranks, logs, jobs, tag, hb, log_paths)
    else:
        procs = [subprocess.Popen(["sleep", "1000000"], env=dict(os.environ, RANK=str(r))) for r in range(ranks)]
        pids = [p.pid for p in procs]
    (root / "ranks.pid").write_text("".join(f"{p}\n" for p in pids))
    scen = {"generate": {"npus": npus, "name": "910B3", "aicore": 62, "hbm_used_mb": 41000, "power_w": 260.0,
                         "temp_c": 48},
            "processes": [{"npu": r % npus, "chip": 0, "pid": pid, "name": "python", "memory_mb": 39000}
                          for r, pid in enumerate(pids)]}
    (root / "npu.json").write_text(json.dumps(scen))
    (root / "writer.json").write_text(json.dumps({"hb": hb, "logs": log_paths, "pids": pids,
                                                  "ranks": [r % (ranks // max(jobs, 1)) for r in range(ranks)]}))
    procs.append(subprocess.Popen([sys.executable, "-c", WRITER, str(root / "writer.json"), str(every)]))
    if chatty > 0:
        procs.append(subprocess.Popen([sys.executable, "-c", CHATTER, str(chatty), *log_paths]))
    return procs


def start_jobs(root: Path, ranks: int, logs: int, jobs: int, tag: str, hb: List[str],
               log_paths: List[str]) -> Tuple[List[subprocess.Popen], List[int]]:
    """One launcher per job (in its own session, so stopping it stops its ranks); global rank r
    is rank r % per_job of job r // per_job; the first logs/jobs ranks of each job write a log each."""
    per = ranks // jobs
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env["NPU_WATCHDOG_BENCH"] = tag
    procs, pids = [], []
    for j in range(jobs):
        spec = {"job": f"bench-job-{j}", "pids": str(root / f"job{j}.pid"),
                "ranks": [{"rank": i, "hb": hb[j * per + i],
                           "log": log_paths[j * (logs // jobs) + i] if i < logs // jobs else None}
                          for i in range(per)]}
        procs.append(subprocess.Popen([sys.executable, "-c", LAUNCHER, json.dumps(spec)], env=env,
                                      start_new_session=True))
        pid_file = Path(spec["pids"])
        wait_for(pid_file.exists, timeout=30, what=f"job {j}'s ranks")
        pids += [int(x) for x in pid_file.read_text().split()]
    return procs, pids


def daemon_config(root: Path, port: int, ranks: int, k: float, tag: str = "") -> Dict[str, Any]:
    """The hand-configured setup; with `tag`, the shipped example config (discovery on) instead,
    restricted to the bench's jobs (`discovery.only_env`: other work on the machine may run jobs),
    without its channels (they would send to the example's URLs), at the same intervals."""
    def d(seconds: float) -> str:
        return f"{seconds / k:g}s"

    windows = {
        "probes": {
            "history": d(3600), "jitter": d(1),
            "npu": {"npu_smi": FAKE_NPU_SMI, "interval": d(10)},
            "process": {"interval": d(10)},
            "heartbeat": {"interval": d(10), "loss_scale": {"window": d(1800)},
                          "throughput": {"window": d(1800), "sustained": d(180), "min_baseline": d(300)}},
            "logs": {"interval": d(3), "rescan": d(30)},
        },
        "trends": {"idle_for": d(600), "busy_for": d(600), "low_util_for": d(600), "hbm_window": d(1800)},
    }
    if tag:
        cfg = yaml.safe_load(SHIPPED.read_text())
        merge(cfg, windows)
        merge(cfg, {"node": {"name": "bench-node"}, "paths": {"state_dir": str(root / "state")},
                    "http": {"listen": f"127.0.0.1:{port}"},
                    "discovery": {"interval": d(10), "only_env": f"NPU_WATCHDOG_BENCH={tag}"}})
        cfg["alerting"]["channels"] = []
        return cfg
    cfg = {"node": {"name": "bench-node"}, "job": {"name": "bench-job"},
           "paths": {"state_dir": str(root / "state")},
           "http": {"listen": f"127.0.0.1:{port}"},
           "logging": {"level": "warning"}, "discovery": {"enabled": False}}
    merge(cfg, windows)
    merge(cfg, {"probes": {
        "npu": {"enabled": True},
        "process": {"enabled": True, "pid_file": str(root / "ranks.pid"), "expected": ranks},
        "heartbeat": {"enabled": True, "paths": [str(root / "hb" / "rank*.json")]},
        "logs": {"enabled": True, "sources": [{"name": "train", "paths": [str(root / "logs" / "*.log")]}]},
    }})
    return cfg


def merge(into: Dict[str, Any], more: Dict[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


class Measured:
    """One process measured by psutil: own CPU (children excluded) and RSS."""

    def __init__(self, name: str, proc: subprocess.Popen):
        self.name, self.proc, self.ps = name, proc, psutil.Process(proc.pid)
        self.rss_peak = 0
        self.threads: List[int] = []

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def rss(self) -> int:
        r = self.ps.memory_info().rss
        self.rss_peak = max(self.rss_peak, r)
        self.threads.append(self.ps.num_threads())
        return r


def scrape(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return len(resp.read())


def scraper(urls: List[str], every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        for u in urls:
            try:
                scrape(u)
            except OSError:
                pass


def watched(status_url: str) -> str:
    """What the daemon really did: probes up, rounds, findings, detector errors, log lines."""
    with urllib.request.urlopen(status_url, timeout=10) as resp:
        st = json.loads(resp.read())
    probes = ", ".join(f"{p['name']} {'up' if p['up'] else 'DOWN'} {p['runs_total']} rounds" for p in st["probes"])
    rules = sorted({f["rule"] for f in st["findings"]})
    disc = st.get("discovery") or {}
    jobs = ", ".join(f"{j.get('name')} ({len(j.get('ranks', []))} ranks)" for j in disc.get("jobs", []))
    with urllib.request.urlopen(status_url.replace("/api/status", "/metrics"), timeout=10) as resp:
        scans = [line.split()[-1] for line in resp.read().decode().splitlines()
                 if line.startswith("npu_watchdog_discovery_scans_total")]
    return (f"daemon: {probes}; findings {rules or 'none'}; detector errors {st['detector_errors'] or 'none'}"
            + (f"; discovered {jobs or 'no job'}, {scans[0] if scans else '?'} scans" if disc.get("enabled") else ""))


def scrape_cost(m: Measured, url: str, n: int = 40) -> float:
    """CPU seconds of one /metrics scrape, from a burst of `n` scrapes."""
    c0 = m.cpu()
    for _ in range(n):
        scrape(url)
    return (m.cpu() - c0) / n


def start_both(root: Path, cfg: Dict[str, Any]) -> Tuple[Measured, Measured, str, str]:
    (root / "config.yaml").write_text(json.dumps(cfg))
    env = dict(os.environ, FAKE_NPU_SMI_SCENARIO=str(root / "npu.json"))
    err = open(root / "daemon.log", "ab")
    prefix = os.environ.get("BENCH_DAEMON_PREFIX", "").split()  # e.g. a profiler's runner (by hand)
    daemon = subprocess.Popen([sys.executable, *(prefix or ["-m", "watchdog"]), "run", "-c", str(root / "config.yaml")],
                              cwd=str(REPO), env=env, stdout=err, stderr=err)
    ne_port = free_port()
    ne = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{ne_port}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d_url = f"http://127.0.0.1:{cfg['http']['listen'].rsplit(':', 1)[1]}/metrics"
    n_url = f"http://127.0.0.1:{ne_port}/metrics"
    wait_for(lambda: scrape(d_url) and scrape(n_url), timeout=60, interval=0.5, what="both endpoints")
    return Measured("daemon", daemon), Measured("node_exporter", ne), d_url, n_url


def run(args: argparse.Namespace) -> int:
    ranks, npus, logs = SIZES[args.size]
    k = args.compress
    window = 300.0 / k
    print(machine())
    print(f"command: python {' '.join(sys.argv)}")
    jobs = (args.jobs or (2 if args.size == "scale" else 1)) if args.discovery else 0
    mode = (f"discovery (the shipped config), {jobs} job(s)" if jobs else "hand-configured probes")
    chatty = f"; {args.chatty:g} progress lines/s per log" if args.chatty else ""
    print(f"setup: {args.size}: {ranks} ranks, {npus} NPUs, {logs} logs{chatty}; {mode}; compress x{k:g} "
          f"(window {window:g}s = 5 min of samples); scrape every {15 / k:g}s")
    root = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    tag = f"bench-{os.getpid()}" if jobs else ""
    node = node_setup(root, ranks, npus, logs, 10.0 / k, jobs, tag, args.chatty)
    cfg = daemon_config(root, free_port(), ranks, k, tag)
    procs: List[subprocess.Popen] = []
    stop = threading.Event()
    try:
        dm, ne, d_url, n_url = start_both(root, cfg)
        procs = [dm.proc, ne.proc]
        time.sleep(args.settle)
        if args.pyspy:  # a sampling profile of the daemon over the first window (by hand)
            pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            subprocess.Popen([pyspy, "record", "-p", str(dm.proc.pid), "-o", args.pyspy, "-f", "raw",
                              "-d", str(int(min(300, args.minutes * 60) / k)), "-r", "200", "--nonblocking"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        threading.Thread(target=scraper, args=([d_url, n_url], 15.0 / k, stop), daemon=True).start()
        before = task_cpu(dm.proc.pid)
        rows = measure(dm, ne, window, int(args.minutes * 60 / window))
        print(per_thread(dm.proc.pid, before, task_cpu(dm.proc.pid), len(rows) * window))
        stop.set()
        print(watched(d_url.replace("/metrics", "/api/status")))
        report(rows, dm, ne, scrape_cost(dm, d_url), scrape_cost(ne, n_url), k)
        return 0
    finally:
        stop.set()
        for p in procs + node:
            stop_proc(p)
        for p in procs + node:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)


def stop_proc(p: subprocess.Popen) -> None:
    """SIGTERM; to the whole session of a job's launcher (its ranks too)."""
    try:
        if os.getpgid(p.pid) == p.pid:
            os.killpg(p.pid, signal.SIGTERM)
        else:
            p.terminate()
    except OSError:
        pass


def task_cpu(pid: int) -> Dict[int, Tuple[float, int]]:
    """(CPU seconds (user + system), wake-ups) of each live thread of `pid`, by its kernel thread
    id. A wake-up is a voluntary context switch (the thread slept and was woken): on a VM each
    one costs a fixed share of a millisecond whatever the thread then does, so an idle daemon's
    CPU follows how often its threads wake as much as what they do."""
    hz = os.sysconf("SC_CLK_TCK")
    out: Dict[int, Tuple[float, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                woken = next((int(line.split()[1]) for line in fh if line.startswith("voluntary_ctxt_switches")), 0)
        except OSError:  # the thread ended
            continue
        out[int(tid)] = ((int(fields[11]) + int(fields[12])) / hz, woken)
    return out


def thread_names(pid: int) -> Dict[int, str]:
    """The daemon's Python thread names by kernel thread id (py-spy reads them; {} without it)."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    try:
        out = subprocess.run([pyspy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    names: Dict[int, str] = {}
    for line in out.splitlines():
        parts = line.split('"')
        head = line.split()
        if line.startswith("Thread ") and len(parts) >= 2 and len(head) > 1:
            try:
                names[int(head[1], 0)] = parts[1]
            except ValueError:
                pass
    return names


def per_thread(pid: int, before: Dict[int, Tuple[float, int]], after: Dict[int, Tuple[float, int]],
               seconds: float) -> str:
    """Where the daemon's CPU went over the measured windows, and how often each thread woke, per
    thread that is still alive (the HTTP server's per-request threads have ended; their share is
    the scrape cost below)."""
    names = thread_names(pid)
    rows = sorted(((c - before.get(t, (0.0, 0))[0], w - before.get(t, (0.0, 0))[1], t)
                   for t, (c, w) in after.items()), reverse=True)
    total, woken = sum(r[0] for r in rows), sum(r[1] for r in rows)
    lines = [f"daemon CPU and wake-ups per live thread over {seconds:g} s (total {total:.2f} s, {woken} wake-ups):"]
    lines += [f"  {c:6.2f} s  {w:6d} wake-ups  {names.get(t, '?')}" for c, w, t in rows if c > 0 or w > 0]
    return "\n".join(lines)


def measure(dm: Measured, ne: Measured, window: float, windows: int) -> List[Dict[str, float]]:
    rows = []
    print(f"{'window':>8} {'daemon CPU s':>13} {'node_exp CPU s':>15} {'ratio':>6} "
          f"{'daemon RSS MB':>14} {'node_exp RSS MB':>16} {'ratio':>6}")
    for i in range(windows):
        c_d, c_n = dm.cpu(), ne.cpu()
        end = time.monotonic() + window
        while time.monotonic() < end:
            dm.rss(), ne.rss()
            time.sleep(min(5.0, max(0.0, end - time.monotonic())))
        row = {"i": i, "d": dm.cpu() - c_d, "n": ne.cpu() - c_n, "rd": dm.rss() / 1e6, "rn": ne.rss() / 1e6}
        rows.append(row)
        print(f"{i + 1:>8} {row['d']:>13.2f} {row['n']:>15.2f} {row['d'] / max(row['n'], 1e-9):>6.2f} "
              f"{row['rd']:>14.1f} {row['rn']:>16.1f} {row['rd'] / row['rn']:>6.2f}", flush=True)
    return rows


def report(rows: List[Dict[str, float]], dm: Measured, ne: Measured, d_scrape: float, n_scrape: float,
           k: float) -> None:
    d_cpu = sum(r["d"] for r in rows) / len(rows)
    n_cpu = sum(r["n"] for r in rows) / len(rows)
    flat = rows[-1]["d"] / rows[1]["d"] if len(rows) > 2 else float("nan")
    print(f"mean CPU per window: daemon {d_cpu:.2f}s, node_exporter {n_cpu:.2f}s, ratio {d_cpu / n_cpu:.2f}")
    print(f"peak RSS: daemon {dm.rss_peak / 1e6:.1f} MB, node_exporter {ne.rss_peak / 1e6:.1f} MB, "
          f"ratio {dm.rss_peak / ne.rss_peak:.2f}")
    print(f"CPU per /metrics scrape: daemon {d_scrape * 1e3:.2f} ms, node_exporter {n_scrape * 1e3:.2f} ms")
    print(f"threads (sampled with RSS): daemon {min(dm.threads)}-{max(dm.threads)}, "
          f"node_exporter {min(ne.threads)}-{max(ne.threads)}")
    print(f"flatness: last window / second window = {flat:.2f} (window = {300 / k:g}s)")
    print(f"SUMMARY cpu_ratio={d_cpu / n_cpu:.2f} rss_ratio={dm.rss_peak / ne.rss_peak:.2f} "
          f"scrape_ms={d_scrape * 1e3:.2f}/{n_scrape * 1e3:.2f} flat={flat:.2f} threads={max(dm.threads)}")


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # clean up the node on kill too
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--minutes", type=float, default=10.0, help="measured time (after --settle)")
    ap.add_argument("--compress", type=float, default=1.0, help="time compression factor K (see above)")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds after start before measuring")
    ap.add_argument("--pyspy", help="write a py-spy profile (raw, collapsed stacks) of the daemon here")
    ap.add_argument("--discovery", action="store_true",
                    help="the shipped config (discovery on) finding the ranks, instead of hand-configured probes")
    ap.add_argument("--jobs", type=int, default=0, help="with --discovery: jobs (default 1 small, 2 scale)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 min at --compress 10")
    ap.add_argument("--chatty", type=float, default=0.0, metavar="R",
                    help="R progress-bar lines a second into every training log (see above)")
    args = ap.parse_args()
    if args.quick:
        args.minutes, args.compress, args.settle = 1.0, 10.0, 5.0
    if args.minutes * 60 < 300.0 / args.compress:
        ap.error(f"--minutes {args.minutes:g} is shorter than one measured window ({300.0 / args.compress:g} s "
                 f"at --compress {args.compress:g}): nothing would be measured")
    if shutil.which(NODE_EXPORTER) is None:
        print(f"{NODE_EXPORTER} is not installed: apt-get install -y prometheus-node-exporter", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

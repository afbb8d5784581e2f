"""Idle overhead of the real daemon on a simulated 8-NPU node, next to prometheus-node-exporter.

Run by hand (`make bench`, or `python bench/bench_idle.py [--quick] [--period 600]`). What runs:

- the daemon as a subprocess (`python -m watchdog run`) at default probe intervals, with
  - the npu probe on the fake npu-smi (generated 8-card 910B table, one process per card),
  - the heartbeat probe on 8 rank heartbeat files, kept fresh by 8 small rank processes,
  - the log probe following 16 files (8 training logs + 8 plog files the ranks append to),
  - the process probe pointed at the 8 rank pids;
  each section is configured as richly as the config schema of this checkout accepts, and the
  probes the daemon really runs are read back from `/api/status` and printed;
- Debian's `prometheus-node-exporter` on a free 127.0.0.1 port (installed with apt-get when
  absent and allowed), for the same period.

Both are scraped at the same interval (like one Prometheus would), and measured with psutil:
CPU seconds (own + reaped children, i.e. the npu-smi calls) over the window, converted to CPU
seconds per hour and percent of one core, and the peak RSS (sampled every second, plus the
kernel's high-water mark VmHWM, which includes start-up). Targets: < 0.5 % of one core, < 60 MB.

Why the rank processes exist: they make the process probe, the heartbeat files and the logs
real, and give the fake npu-smi real pids to list. Their own CPU is not counted.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import Daemon, free_port, http_get, parse_metrics  # noqa: E402
from watchdog.config.schema import Config  # noqa: E402

FAKE_NPU_SMI = str(REPO / "tests" / "fakes" / "npu-smi")
NODE_EXPORTER = "prometheus-node-exporter"
TARGET_CORE_PCT = 0.5
TARGET_RSS_MB = 60.0

# One synthetic rank: a heartbeat every `hb` seconds (atomic rename), a training-log line and a
# plog line every `log` seconds. Mostly asleep, like a rank waiting on the device.
RANK_CODE = r"""
import json, os, sys, time
root, rank, hb_every, log_every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
pid = os.getpid()
hb = os.path.join(root, "hb", "rank%d.json" % rank)
train = open(os.path.join(root, "logs", "train", "rank%d.log" % rank), "a", buffering=1)
plog = open(os.path.join(root, "logs", "plog", "plog-%d_%s.log" % (pid, time.strftime("%Y%m%d%H%M%S"))), "a", buffering=1)
step, last_log = 0, 0.0
while True:
    step += 1
    now = time.time()
    tmp = hb + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"step": step, "time": now, "loss": 2.0 + 1.0 / step, "grad_norm": 1.1, "loss_scale": 65536.0,
                   "tokens_per_s": 3100.0, "phase": "train", "rank": rank, "pid": pid}, fh)
    os.replace(tmp, hb)
    if now - last_log >= log_every:
        last_log = now
        train.write("%s | iteration %7d/ 100000 | consumed samples: %d | lm loss: %.6E | loss scale: 65536.0 | grad norm: 1.100 |\n"
                    % (time.strftime("%Y-%m-%d %H:%M:%S"), step, step * 64, 2.0 + 1.0 / step))
        plog.write("[INFO] RUNTIME(%d,python3):%s [stream.cc:512] step %d launched\n"
                   % (pid, time.strftime("%Y-%m-%d-%H:%M:%S"), step))
    time.sleep(hb_every)
"""


# -- machine and environment ---------------------------------------------------------------------
def machine() -> Dict[str, str]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": str(os.cpu_count()), "cpu": model, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"), "command": " ".join(["python"] + sys.argv)}


def print_machine(m: Dict[str, str]) -> None:
    print(f"machine: nproc={m['nproc']}, CPU {m['cpu']}, Python {m['python']}, {m['date']}")
    print(f"command: {m['command']}")


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def scenario(pids: List[int], delay: float = 0.0) -> Dict[str, Any]:
    """An 8-card 910B node under training: one rank process per card, busy AI cores."""
    return {"generate": {"npus": 8, "name": "910B3", "aicore": 62, "hbm_used_mb": 41000, "power_w": 260.0,
                         "temp_c": 48},
            "processes": [{"npu": i, "chip": 0, "pid": pid, "name": "python", "memory_mb": 39000}
                          for i, pid in enumerate(pids)],
            "delay_seconds": delay}


# -- config: as rich as this checkout's schema accepts -------------------------------------------
def adapt_probes(base: Dict[str, Any], candidates: Dict[str, List[Dict[str, Any]]]) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """Pick, per probe section, the richest candidate the config schema of this checkout accepts.

    Features are merged from several branches; a key the schema does not know yet is an error
    (StrictModel), so the benchmark degrades per section instead of failing. Returns the config
    and, per section, which candidate ("full", "reduced", ...) was used.
    """
    cfg = copy.deepcopy(base)
    # Each section is tried together with the sections already chosen only: the weakest fallback
    # of a section not yet decided may itself be invalid (e.g. a probe enabled without paths).
    chosen: Dict[str, Any] = {}
    used: Dict[str, str] = {}

    def error(probes: Dict[str, Any]) -> Optional[str]:
        trial = copy.deepcopy(cfg)
        trial.setdefault("probes", {}).update(probes)
        try:
            Config.model_validate(trial)
            return None
        except Exception as exc:  # the schema's own message is what the reader needs
            return " ".join(str(exc).split())[:200]

    for name, cands in candidates.items():
        last_error = ""
        for i, cand in enumerate(cands):
            err = error({**chosen, name: cand})
            if err is None:
                chosen[name] = cand
                used[name] = "full" if i == 0 else f"reduced #{i}"
                break
            last_error = err
        else:
            used[name] = f"not configurable here ({last_error})"
    cfg.setdefault("probes", {}).update(chosen)
    return cfg, used


def idle_config(root: Path, pid_file: Path) -> Tuple[Dict[str, Any], Dict[str, str]]:
    hb_glob = str(root / "hb" / "rank*.json")
    train_glob = str(root / "logs" / "train" / "rank*.log")
    plog_glob = str(root / "logs" / "plog" / "plog-*.log")
    candidates = {
        "process": [
            {"enabled": True, "pid_file": str(pid_file), "expected": 8},
            {"enabled": True, "pid_file": str(pid_file)},
            {"enabled": True},
        ],
        "heartbeat": [
            {"enabled": True, "paths": [hb_glob]},
            {"enabled": True},
        ],
        "npu": [
            {"enabled": True, "npu_smi": FAKE_NPU_SMI},
        ],
        "logs": [
            {"enabled": True, "sources": [{"name": "train", "paths": [train_glob], "kind": "training"},
                                          {"name": "plog", "paths": [plog_glob], "kind": "plog"}]},
            {"enabled": True, "sources": [{"name": "train", "paths": [train_glob]},
                                          {"name": "plog", "paths": [plog_glob]}]},
            {"enabled": True},
        ],
    }
    base = {"node": {"name": "bench-node"}, "job": {"name": "bench-job"},
            "paths": {"state_dir": str(root / "state")}}
    return adapt_probes(base, candidates)


# -- processes -------------------------------------------------------------------------------------
class Ranks:
    """8 synthetic rank processes writing heartbeats and log lines."""

    def __init__(self, root: Path, n: int = 8, hb_every: float = 2.0, log_every: float = 10.0):
        for d in ("hb", "logs/train", "logs/plog"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self.procs = [subprocess.Popen([sys.executable, "-c", RANK_CODE, str(root), str(r), str(hb_every), str(log_every)])
                      for r in range(n)]

    @property
    def pids(self) -> List[int]:
        return [p.pid for p in self.procs]

    def wait_files(self, root: Path, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (len(list((root / "hb").glob("rank*.json"))) == len(self.procs)
                    and len(list((root / "logs" / "plog").glob("plog-*.log"))) == len(self.procs)):
                return
            time.sleep(0.1)
        raise RuntimeError("rank processes did not create their files")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def find_node_exporter(install: bool) -> Tuple[Optional[str], str]:
    path = shutil.which(NODE_EXPORTER) or (f"/usr/bin/{NODE_EXPORTER}" if os.path.exists(f"/usr/bin/{NODE_EXPORTER}") else None)
    if path:
        return path, "present"
    if not install:
        return None, "not installed (--no-install)"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "not installed and apt-get not usable (needs root on Debian/Ubuntu)"
    print("installing prometheus-node-exporter with apt-get ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", NODE_EXPORTER]):
        r = subprocess.run(argv, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            return None, f"apt-get failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
    path = shutil.which(NODE_EXPORTER) or f"/usr/bin/{NODE_EXPORTER}"
    return (path, "installed now") if os.path.exists(path) else (None, "apt-get ran but the binary is missing")


def start_node_exporter(path: str, log: Path) -> Tuple[subprocess.Popen, str]:
    port = free_port()
    fh = open(log, "ab")
    proc = subprocess.Popen([path, f"--web.listen-address=127.0.0.1:{port}"], stdout=fh, stderr=fh)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"node exporter exited ({proc.returncode}); see {log}")
        try:
            if http_get(url + "/metrics", timeout=2)[0] == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("node exporter did not answer")


# -- measurement -----------------------------------------------------------------------------------
def cpu_total(p: psutil.Process) -> Tuple[float, float]:
    """(own CPU seconds, CPU seconds of reaped children)."""
    t = p.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def vm_hwm_bytes(pid: int) -> Optional[int]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class Watch:
    """Samples one process (RSS every second) over the window."""

    def __init__(self, name: str, pid: int):
        self.name = name
        self.proc = psutil.Process(pid)
        self.peak_rss = 0
        self.rss_sum = 0
        self.samples = 0

    def begin(self) -> None:
        self.t0 = time.monotonic()
        self.own0, self.child0 = cpu_total(self.proc)

    def sample(self) -> None:
        rss = self.proc.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss)
        self.rss_sum += rss
        self.samples += 1

    def end(self) -> Dict[str, Any]:
        own1, child1 = cpu_total(self.proc)
        wall = time.monotonic() - self.t0
        own, child = own1 - self.own0, child1 - self.child0
        total = own + child
        return {"name": self.name, "wall": wall, "cpu_own": own, "cpu_children": child, "cpu": total,
                "cpu_per_hour": total / wall * 3600, "core_pct": total / wall * 100,
                "peak_rss": self.peak_rss, "mean_rss": self.rss_sum / max(1, self.samples),
                "hwm": vm_hwm_bytes(self.proc.pid)}


def fake_npu_smi_cost(env: Dict[str, str], n: int = 10) -> float:
    """CPU seconds of one `npu-smi info` of the fake (a Python script; the real tool is C)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        subprocess.run([FAKE_NPU_SMI, "info"], env=env, capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / n


def scraper(urls: List[str], every: float, stop: threading.Event, counts: Dict[str, int]) -> None:
    while not stop.wait(every):
        for u in urls:
            try:
                with urllib.request.urlopen(u + "/metrics", timeout=10) as r:
                    r.read()
                counts[u] = counts.get(u, 0) + 1
            except OSError:
                counts[u + " errors"] = counts.get(u + " errors", 0) + 1


def active_probes(d: Daemon) -> List[Dict[str, Any]]:
    st = d.status()
    return [{"name": p["name"], "up": p["up"], "runs": p["runs_total"], "interval": p["interval_seconds"],
             "last": p.get("last_result") or p.get("last_error") or ""} for p in st["probes"]]


def what_is_watched(metrics: Dict[str, float]) -> List[str]:
    out = []
    def count(prefix: str) -> int:
        return sum(1 for k in metrics if k.startswith(prefix + "{") or k == prefix)
    def total(prefix: str) -> float:
        return sum(v for k, v in metrics.items() if k.startswith(prefix + "{") or k == prefix)
    out.append(f"npus_seen={metrics.get('npu_watchdog_npus_seen', 'n/a')}")
    out.append(f"heartbeat series={count('npu_watchdog_heartbeat_age_seconds')}")
    out.append(f"log files followed={total('npu_watchdog_log_files_followed'):g}"
               if count("npu_watchdog_log_files_followed") else "log files followed=n/a (no log metrics)")
    alive_key = 'npu_watchdog_job_ranks_alive{training_job="bench-job"}'
    out.append(f"ranks alive={metrics.get(alive_key, 'n/a')}")
    return out


def fmt_mb(b: Optional[float]) -> str:
    return "n/a" if b is None else f"{b / 1e6:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="45 s window (smoke run)")
    ap.add_argument("--period", type=float, default=None, help="measurement window in seconds (default 600)")
    ap.add_argument("--settle", type=float, default=None, help="seconds after start-up before measuring (default 20)")
    ap.add_argument("--scrape-interval", type=float, default=15.0,
                    help="scrape both /metrics this often during the window (0: never); default 15")
    ap.add_argument("--no-node-exporter", action="store_true")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install the node exporter")
    args = ap.parse_args()
    period = args.period if args.period is not None else (45.0 if args.quick else 600.0)
    settle = args.settle if args.settle is not None else (5.0 if args.quick else 20.0)

    m = machine()
    print_machine(m)
    tmp = Path(tempfile.mkdtemp(prefix="npuwd-bench-idle-"))
    ranks: Optional[Ranks] = None
    daemon: Optional[Daemon] = None
    ne_proc: Optional[subprocess.Popen] = None
    stop = threading.Event()
    try:
        ranks = Ranks(tmp)
        ranks.wait_files(tmp)
        pid_file = tmp / "ranks.pid"
        pid_file.write_text("".join(f"{p}\n" for p in ranks.pids))
        scen = tmp / "npu-scenario.json"
        write_json(scen, scenario(ranks.pids))
        env = {"FAKE_NPU_SMI_SCENARIO": str(scen)}
        smi_cpu = fake_npu_smi_cost(dict(os.environ, **env))
        cfg, used = idle_config(tmp, pid_file)
        print("config sections:", ", ".join(f"probes.{k}: {v}" for k, v in used.items()))

        daemon = Daemon(tmp, cfg, env=env).start()
        ne_status = "disabled (--no-node-exporter)"
        ne_url = None
        if not args.no_node_exporter:
            path, ne_status = find_node_exporter(not args.no_install)
            if path:
                ne_proc, ne_url = start_node_exporter(path, tmp / "node-exporter.log")
                ne_status += f", {ne_url}"
        print(f"prometheus-node-exporter: {ne_status}")
        time.sleep(settle)

        watches = [Watch("npu-watchdog", daemon.proc.pid)]
        if ne_proc is not None:
            watches.append(Watch("prometheus-node-exporter", ne_proc.pid))
        counts: Dict[str, int] = {}
        urls = [daemon.url] + ([ne_url] if ne_url else [])
        runs0 = {p["name"]: p["runs"] for p in active_probes(daemon)}
        for w in watches:
            w.begin()
        if args.scrape_interval > 0:
            threading.Thread(target=scraper, args=(urls, args.scrape_interval, stop, counts), daemon=True).start()
        print(f"measuring for {period:g} s (settled {settle:g} s after start-up; scraping both every "
              f"{args.scrape_interval:g} s) ...", flush=True)
        end = time.monotonic() + period
        next_report = time.monotonic() + 60
        while time.monotonic() < end:
            for w in watches:
                w.sample()
            daemon.alive()
            if time.monotonic() >= next_report:
                print(f"  ... {period - (end - time.monotonic()):.0f}/{period:g} s", flush=True)
                next_report += 60
            time.sleep(1.0)
        results = [w.end() for w in watches]
        stop.set()

        probes = active_probes(daemon)
        metrics = parse_metrics(daemon.metrics_text())
        print("\nprobes the daemon runs (from /api/status):")
        for p in probes:
            print(f"  {p['name']:<12} {'up' if p['up'] else 'DOWN':<5} every {p['interval']:g}s, "
                  f"{p['runs'] - runs0.get(p['name'], 0)} rounds in the window; {p['last']}"[:160])
        configured = {"process", "heartbeat", "npu", "logs"}
        running = {p["name"] for p in probes}
        missing = sorted(configured - running)
        if missing:
            print(f"  configured but not run by this daemon build (feature not merged here): {', '.join(missing)}")
        print("  watched:", ", ".join(what_is_watched(metrics)))
        npu_rounds = next((p["runs"] - runs0.get("npu", 0) for p in probes if p["name"] == "npu"), 0)

        print(f"\nwindow {results[0]['wall']:.0f} s; scrapes: "
              + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
        print(f"{'process':<26}{'CPU s/h':>9}{'% core':>8}{'own s':>8}{'child s':>9}{'peak RSS MB':>13}"
              f"{'mean RSS MB':>13}{'VmHWM MB':>10}")
        for r in results:
            print(f"{r['name']:<26}{r['cpu_per_hour']:>9.1f}{r['core_pct']:>8.3f}{r['cpu_own']:>8.2f}"
                  f"{r['cpu_children']:>9.2f}{fmt_mb(r['peak_rss']):>13}{fmt_mb(r['mean_rss']):>13}{fmt_mb(r['hwm']):>10}")
        d = results[0]
        smi_est = npu_rounds * smi_cpu
        print(f"npu-smi: {npu_rounds} `info` calls in the window; the fake npu-smi is a Python script costing "
              f"{smi_cpu * 1000:.0f} ms CPU per call (measured), ~{smi_est:.2f} s of the daemon's child CPU. "
              f"Without it: {(d['cpu_own']) / d['wall'] * 3600:.1f} CPU s/h, {d['cpu_own'] / d['wall'] * 100:.3f} % core.")
        cpu_ok = d["core_pct"] < TARGET_CORE_PCT
        rss_ok = d["peak_rss"] < TARGET_RSS_MB * 1e6
        ne = f"; node-exporter {results[1]['core_pct']:.3f} % core, {fmt_mb(results[1]['peak_rss'])} MB" if len(results) > 1 else "; node-exporter not measured"
        print(f"\nSUMMARY idle: daemon {d['core_pct']:.3f} % of one core ({d['cpu_per_hour']:.1f} CPU s/h, "
              f"target < {TARGET_CORE_PCT} %: {'PASS' if cpu_ok else 'MISS'}), peak RSS {fmt_mb(d['peak_rss'])} MB "
              f"(target < {TARGET_RSS_MB:g} MB: {'PASS' if rss_ok else 'MISS'}) over {d['wall']:.0f} s; "
              f"probes run: {','.join(sorted(running)) or 'none'}{ne}")
        return 0
    finally:
        stop.set()
        if daemon is not None and daemon.proc is not None:
            rc = daemon.stop()
            if rc not in (0, None):
                print(f"daemon exit code {rc}; log:\n{daemon.log()[-3000:]}")
        if ne_proc is not None:
            ne_proc.terminate()
            try:
                ne_proc.wait(5)
            except subprocess.TimeoutExpired:
                ne_proc.kill()
                ne_proc.wait()
        if ranks is not None:
            ranks.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""A simulated fleet on one machine, for the fleet-mode tests and the load benchmark.

Everything is real except the NPU: each simulated node is a real daemon subprocess with its own
state directory, port, fake npu-smi scenario and log directory, and real rank processes (small
shell loops) that write their own training logs and, on a signal, the lines a rank writes when
it runs out of NPU memory (then dies) or when its collective times out (then hangs on). The
Alertmanager peers are the real `prometheus-alertmanager` in cluster mode on loopback, configured
from the shipped contrib/alertmanager files; the relay is the real `npu-watchdog relay`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from tests.helpers import REPO, Daemon, Server, free_port, http_get, wait_for

FAKE_NPU_SMI = REPO / "tests" / "fakes" / "npu-smi"
AM_DIR = REPO / "contrib" / "alertmanager"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

#: A rank: a Megatron iteration report every 30 s, which the daemon counts as training progress
#: (the stall rule's log evidence; a line it did not recognise would make every node call a
#: `stall` `stall.duration` after its daemon started, a page of its own in the middle of whatever
#: scenario runs then). SIGUSR1: the NPU OOM line, then it dies. SIGUSR2: the HCCL watchdog
#: timeout line of a collective that hung, then it goes on (as after the launcher's restart), so
#: the incident ends when the log rule's `hold` runs out. `$1` log file, `$2` rank.
RANK_SCRIPT = r'''
log="$1"; rank="$2"
trap 'echo "[rank$rank]: RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU $rank; 60.97 GiB total capacity; 58.10 GiB already allocated)" >> "$log"; exit 1' USR1
trap 'echo "[rank$rank]:[E ProcessGroupHCCL.cpp:563] [Rank $rank] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=158046, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800027 milliseconds before timing out." >> "$log"' USR2
i=0
while :; do
  i=$((i+1))
  echo " iteration $i/  100000 | consumed samples: $((i*512)) | elapsed time per iteration (ms): 30000.0 | lm loss: 2.310000E+00 |" >> "$log"
  sleep 30 & wait $!
done
'''


def write_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class SimNode:
    """One simulated training node: its daemon (fleet mode), ranks, logs and fake npu-smi."""

    def __init__(self, root: Path, index: int, job: str, am_urls: List[str], ranks: int = 4,
                 npu_interval: str = "10s", logs_interval: str = "1s", group_window: str = "1s",
                 hold: str = "10s"):
        self.root = root
        self.name = f"node-{index:02d}"
        self.ranks_n = ranks
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.scenario = root / "npu-smi.json"
        self.devices: Dict[str, Dict[str, Any]] = {}
        self._write_scenario()
        self.ranks: Dict[int, subprocess.Popen] = {}
        channels = [{"type": "alertmanager", "name": f"am-{i}", "url": url, "resend_interval": "10s",
                     "alert_ttl": "2m"} for i, url in enumerate(am_urls)]
        self.daemon = Daemon(root, {
            "node": {"name": self.name}, "job": {"name": job},
            "probes": {
                "npu": {"enabled": True, "interval": npu_interval, "npu_smi": str(FAKE_NPU_SMI),
                        "command_timeout": "10s", "health_interval": "0s"},
                "logs": {"enabled": True, "interval": logs_interval, "hold": hold,
                         "sources": [{"name": "train", "paths": [str(root / "logs" / "*.log")]}]},
            },
            "alerting": {"mode": "fleet", "group_window": group_window, "resolve_delay": "2s", "reminder": "0s",
                         "retry_initial": "500ms", "retry_max": "2s", "channels": channels},
        }, env={"FAKE_NPU_SMI_SCENARIO": str(self.scenario)})

    def _write_scenario(self) -> None:
        write_atomic(self.scenario, {"generate": {"npus": self.ranks_n, "aicore": 90}, "devices": self.devices})

    def set_card(self, npu: int, gone: bool) -> None:
        self.devices = {str(npu): {"gone": True}} if gone else {}
        self._write_scenario()

    def start_rank(self, rank: int) -> None:
        log = self.root / "logs" / f"train_rank_{rank}.log"
        self.ranks[rank] = subprocess.Popen(["/bin/sh", "-c", RANK_SCRIPT, "rank", str(log), str(rank)],
                                            start_new_session=True, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> "SimNode":
        for r in range(self.ranks_n):
            self.start_rank(r)
        self.daemon.start(wait=False)
        return self

    def signal_ranks(self, sig: int, ranks: Optional[List[int]] = None) -> None:
        for r in (range(self.ranks_n) if ranks is None else ranks):
            p = self.ranks.get(r)
            if p is not None and p.poll() is None:
                p.send_signal(sig)

    def stop(self) -> None:
        for p in self.ranks.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the shell and its sleep
            except ProcessLookupError:
                pass
            p.wait()
        if self.daemon.proc is not None:
            self.daemon.stop()


def shipped_am_config(relay_url: str, templates: Path, group_wait: str, group_interval: str) -> Dict[str, Any]:
    """contrib/alertmanager/alertmanager.yml with this machine's paths and shorter timers."""
    cfg = yaml.safe_load((AM_DIR / "alertmanager.yml").read_text())
    cfg["templates"] = [str(templates / "*.tmpl")]
    cfg["route"].update(group_wait=group_wait, group_interval=group_interval)
    for rc in cfg["receivers"]:
        for w in rc.get("webhook_configs", []):
            w["url"] = relay_url
    cfg["receivers"] = [rc for rc in cfg["receivers"] if "slack_configs" not in rc]
    return cfg


class AmCluster:
    """Alertmanager peers gossiping on loopback (`--cluster.peer`), each with its own storage."""

    def __init__(self, tmp: Path, relay_url: str, peers: int = 2, group_wait: str = "5s",
                 group_interval: str = "3s"):
        tmp.mkdir(parents=True, exist_ok=True)
        conf = tmp / "alertmanager.yml"
        conf.write_text(yaml.safe_dump(shipped_am_config(relay_url, AM_DIR / "templates", group_wait, group_interval)))
        web = [free_port() for _ in range(peers)]
        gossip = [free_port() for _ in range(peers)]
        self.urls = [f"http://127.0.0.1:{p}" for p in web]
        self.servers: List[Server] = []
        for i in range(peers):
            argv = [str(ALERTMANAGER), f"--config.file={conf}", f"--storage.path={tmp / f'data-{i}'}",
                    f"--web.listen-address=127.0.0.1:{web[i]}", f"--cluster.listen-address=127.0.0.1:{gossip[i]}",
                    "--cluster.peer-timeout=3s", "--log.level=info"]
            argv += [f"--cluster.peer=127.0.0.1:{gossip[j]}" for j in range(peers) if j != i]
            self.servers.append(Server(argv, tmp / f"alertmanager-{i}.log"))

    def wait_ready(self) -> None:
        for s, url in zip(self.servers, self.urls):
            wait_for(lambda: s.alive() and http_get(url + "/-/ready")[0] == 200, timeout=90, what="alertmanager ready")
            wait_for(lambda: len(self.status(url)["cluster"]["peers"]) == len(self.servers), timeout=90,
                     what="alertmanager peers joined")

    def first_sender(self) -> int:
        """The index of the peer at position 0, which sends a group's notifications first (the
        others wait `--cluster.peer-timeout` per position): the members' names in sorted order."""
        names = [self.status(url)["cluster"]["name"] for url in self.urls]
        return names.index(min(names))

    @staticmethod
    def status(url: str) -> Dict[str, Any]:
        code, body = http_get(url + "/api/v2/status")
        assert code == 200, body
        return json.loads(body)

    @staticmethod
    def alerts(url: str, job: str, active_only: bool = True) -> List[Dict[str, Any]]:
        q = f'?filter=training_job%3D%22{job}%22&active=true&silenced=true&inhibited=true'
        code, body = http_get(url + "/api/v2/alerts" + q, timeout=30)
        assert code == 200, body
        return [a for a in json.loads(body) if not active_only or a["status"]["state"] == "active"]

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


class Relay:
    """`npu-watchdog relay` as a subprocess, sending to one signed Feishu channel."""

    def __init__(self, tmp: Path, feishu_url: str, secret: str):
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = tmp / "relay.yaml"
        conf.write_text(yaml.safe_dump({
            "listen": f"127.0.0.1:{self.port}", "state_dir": str(tmp / "state"),
            "alerting": {"retry_initial": "500ms", "retry_max": "2s",
                         "channels": [{"type": "feishu", "name": "oncall", "url": feishu_url, "secret": secret,
                                       "min_severity": "info"}]}}))
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = Server([sys.executable, "-m", "watchdog", "relay", "-c", str(conf)], tmp / "relay.log")
        wait_for(lambda: self.server.alive() and http_get(self.url + "/healthz")[0] == 200, timeout=30,
                 what="relay /healthz")

    def health(self) -> Dict[str, Any]:
        return json.loads(http_get(self.url + "/healthz")[1])

    def log(self) -> str:
        return self.server.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.server.stop()


def post_json(url: str, doc: Any, timeout: float = 30.0) -> int:
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()
        return r.status


def wait_quiet(check, seconds: float) -> None:
    """`check()` (an assertion) must keep holding for `seconds`: nothing more arrives late."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(0.5)
    check()


# -- the load generator: a large job's incident as the node daemons would push it --------------------


def node_alerts(job: str, node: int, ranks: int, first_seen: float, ttl: float, resolved: bool = False,
                culprit: int = -1) -> List[Dict[str, Any]]:
    """The alerts one node of a collective-hang incident pushes in fleet mode: an HCCL timeout per
    rank (symptoms; on `culprit`, rank 0 is an OOM, the root), as AlertmanagerChannel shapes them."""
    from watchdog.alerting.deliver.channels.webhook import rfc3339

    now = time.time()
    host = f"node-{node:04d}"
    out = []
    for r in range(ranks):
        root = node == culprit and r == 0
        line = ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB" if root else
                f"[Rank {r}] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=158046, OpType=ALLREDUCE)")
        seen = first_seen + (0 if root else 30) + node * 0.001  # the peers time out after the OOM
        out.append({
            "labels": {"alertname": "log_oom" if root else "log_hccl", "severity": "critical", "host": host,
                       "training_job": job, "rank": str(node * ranks + r),
                       "log_rule": "oom_torch_npu" if root else "hccl_collective_watchdog_timeout",
                       "role": "root" if root else "symptom"},
            "annotations": {"summary": f"{'NPU out of memory' if root else 'HCCL timeout'} (rank {node * ranks + r})",
                            "hint": "find the first rank that failed", "first_seen": rfc3339(seen),
                            "log_lines": line},
            "startsAt": rfc3339(seen if resolved else now),  # as AlertmanagerChannel in fleet mode
            "endsAt": rfc3339(now if resolved else now + ttl),
        })
    return out


def push_incident(urls: List[str], job: str, nodes: int, ranks: int, first_seen: float, resolved: bool = False,
                  threads: int = 8, culprit: int = -1) -> Dict[str, Any]:
    """Every node pushes its alerts once to every peer (one POST each), `threads` at a time.
    Returns counts of POSTs, failures, alerts and bytes, and the wall time."""
    import concurrent.futures

    bodies = [json.dumps(node_alerts(job, n, ranks, first_seen, 300.0, resolved, culprit)).encode()
              for n in range(nodes)]
    failures: List[str] = []

    def post(args: tuple) -> None:
        url, body = args
        req = urllib.request.Request(url + "/api/v2/alerts", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
        except urllib.error.HTTPError as exc:
            failures.append(f"HTTP {exc.code}: {exc.read()[:200]!r}")
        except Exception as exc:  # counted, not raised: the caller decides what is acceptable
            failures.append(f"{type(exc).__name__}: {exc}")

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        list(ex.map(post, [(u, b) for b in bodies for u in urls]))
    return {"posts": len(bodies) * len(urls), "failures": failures, "alerts": nodes * ranks,
            "bytes_per_peer": sum(len(b) for b in bodies), "seconds": time.monotonic() - t0}

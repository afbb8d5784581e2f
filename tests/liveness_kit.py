"""Shared pieces of the liveness tests: real child processes and a probe+detector harness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

from tests.helpers import REPO, wait_for
from watchdog.config.schema import Config
from watchdog.detectors import liveness
from watchdog.core.findings import Finding
from watchdog.probes import heartbeat as heartbeat_probe
from watchdog.probes import process as process_probe
from watchdog.probes.base import ProbeContext
from watchdog.core.state import StateStore

CONTRIB = str(REPO / "contrib" / "heartbeat")

#: A trainer stand-in writing its heartbeat with the contrib helper. argv: contrib path mode marker.
WRITER = r"""
import math, os, sys, time
sys.path.insert(0, sys.argv[1])
from heartbeat import Heartbeat
path, mode = sys.argv[2], sys.argv[3]
hb = Heartbeat(path, min_interval=0, phase="train")
step = 0
def forever():
    while True:
        time.sleep(3600)
if mode == "healthy":
    while True:
        step += 1
        hb.beat(step=step, loss=1.0 / step, grad_norm=0.5, loss_scale=65536.0, tokens_per_s=1000.0)
        time.sleep(0.05)
elif mode == "healthy_samples":  # a trainer that counts samples, not tokens
    while True:
        step += 1
        hb.beat(step=step, loss=1.0 / step, samples_per_s=12.5)
        time.sleep(0.05)
elif mode.startswith("stop_after:"):
    for step in range(1, int(mode.split(":")[1]) + 1):
        hb.beat(step=step, loss=1.0)
        time.sleep(0.05)
    forever()
elif mode == "no_progress":
    hb.beat(step=7, loss=1.0)
    while True:          # the loop spins and keeps touching the file, the step never moves
        hb.flush()
        time.sleep(0.05)
elif mode == "checkpoint":
    for step in range(1, 4):
        hb.beat(step=step, loss=1.0)
        time.sleep(0.05)
    hb.phase_now("checkpoint")
    forever()
elif mode == "done":
    for step in range(1, 4):
        hb.beat(step=step, loss=1.0)
        time.sleep(0.05)
    hb.done()
    time.sleep(float(os.environ.get("LINGER", "0")))
elif mode == "nan":
    hb.beat(step=1, loss=0.0, grad_norm=float("nan"))
    forever()
"""

#: A launcher that starts one rank and never reaps it: the rank becomes a zombie when it exits.
NON_REAPING_PARENT = r"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))",
                          sys.argv[1], sys.argv[2]])
print(child.pid, flush=True)
while True:
    time.sleep(3600)
"""

SLEEPER = "import sys, time; time.sleep(600)"
BUSY = "import sys\nwhile True:\n    pass"


class Children:
    """Starts child processes and guarantees they are gone at the end of the test."""

    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []
        self.marker = "lvtest-" + uuid.uuid4().hex[:10]

    def spawn(self, code: str, *args: str, rank: Optional[int] = None, env: Optional[Dict[str, str]] = None,
              stdout: Any = None) -> subprocess.Popen:
        e = dict(os.environ)
        e.pop("RANK", None)
        e.pop("LOCAL_RANK", None)
        if rank is not None:
            e["RANK"] = str(rank)
        e.update(env or {})
        p = subprocess.Popen([sys.executable, "-c", code, *args, self.marker], env=e,
                             stdout=stdout, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def writer(self, path: Path, mode: str, rank: Optional[int] = None, **kw: Any) -> subprocess.Popen:
        return self.spawn(WRITER, CONTRIB, str(path), mode, rank=rank, **kw)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.kill()
            p.wait()


def make_config(tmp: Path, marker: str, process: Optional[Dict[str, Any]] = None,
                heartbeat: Optional[Dict[str, Any]] = None) -> Config:
    probes: Dict[str, Any] = {}
    if process is not None:
        probes["process"] = {"enabled": True, "interval": "1s", "cmdline": marker, **process}
    if heartbeat is not None:
        probes["heartbeat"] = {"enabled": True, "interval": "1s", "paths": [str(tmp / "rank*.json")], **heartbeat}
    return Config.model_validate({"node": {"name": "node-t"}, "job": {"name": "job-t"},
                                  "paths": {"state_dir": str(tmp / "state")}, "probes": probes})


class Harness:
    """The real probes feeding a real StateStore, and the liveness detector over its views."""

    def __init__(self, config: Config):
        self.config = config
        self.store = StateStore(history_seconds=config.probes.history)
        ctx = ProbeContext(config=config, state_dir=config.paths.state_dir)
        self.probes = process_probe.build(ctx) + heartbeat_probe.build(ctx)
        self.last: Dict[str, Any] = {}

    def round(self) -> None:
        for p in self.probes:
            c = p.collect()
            self.store.put(p.name, c.value)
            self.last[p.name] = c.value

    def findings(self) -> List[Finding]:
        return liveness.detect(self.store.view(), self.config)

    def find(self, rule: str, **labels: str) -> List[Finding]:
        return [f for f in self.findings()
                if f.rule == rule and all(f.labels.get(k) == v for k, v in labels.items())]

    def wait_finding(self, rule: str, timeout: float = 20.0, **labels: str) -> Finding:
        def check() -> Any:
            self.round()
            return self.find(rule, **labels)
        return wait_for(check, timeout=timeout, interval=0.1, what=f"finding {rule} {labels}")[0]

    def wait_round(self, pred: Any, timeout: float = 20.0, what: str = "observation", every: float = 0.1) -> Any:
        """Run a round every `every` seconds until `pred` holds after one."""
        def check() -> Any:
            self.round()
            return pred()
        return wait_for(check, timeout=timeout, interval=every, what=what)

    def processes(self) -> Any:
        return self.last["process"].processes

    def reading(self, rank: int) -> Any:
        return next(r for r in self.last["heartbeat"].readings if r.rank == rank)

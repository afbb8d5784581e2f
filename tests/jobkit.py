"""Real training-job process trees for discovery tests (no /proc mocks).

`TrainJob` starts the torchrun-like launcher (tests/fakes/trainjob/torchrun), the same under a
`bash -c` wrapper, or a MindSpore-style shell loop (RANK_ID/DEVICE_ID), with the ranks' stdout in
per-rank files. Every job carries a unique `NPU_WATCHDOG_TEST_JOB` tag in its ranks' environment,
so a daemon or `discover` restricted with `discovery.only_env` sees this test's job only, even
when other tests run training processes on the same machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

from tests.helpers import REPO, wait_for

FAKES = REPO / "tests" / "fakes" / "trainjob"
TORCHRUN = FAKES / "torchrun"
TRAIN = FAKES / "train.py"
TAG = "NPU_WATCHDOG_TEST_JOB"


class TrainJob:
    def __init__(self, root: Path, ranks: int = 4, style: str = "torchrun", workers: int = 0,
                 env: Optional[Dict[str, str]] = None, tag: Optional[str] = None, port: str = "29500",
                 shared_log: bool = False):
        self.root = Path(root)
        self.logs = self.root / "logs"
        self.ctl = self.root / "ctl"
        for d in (self.logs, self.ctl):
            d.mkdir(parents=True, exist_ok=True)
        self.ranks, self.style, self.workers, self.port = ranks, style, workers, port
        #: torchrun style: one file (logs/train.log) for the launcher's and every rank's output,
        #: as `torchrun ... > train.log 2>&1` makes it, instead of a file per rank.
        self.shared_log = shared_log
        self.tag = tag or f"t-{uuid.uuid4().hex[:12]}"
        self.env = dict(os.environ, FAKE_TRAIN_CONTROL=str(self.ctl), **{TAG: self.tag}, **(env or {}))
        self.env.pop("RANK", None)
        self.proc: Optional[subprocess.Popen] = None

    @property
    def only_env(self) -> str:
        return f"{TAG}={self.tag}"

    def argv(self) -> List[str]:
        work = ["--workers", str(self.workers)] if self.workers else []
        logdir = [] if self.shared_log else ["--log-dir", str(self.logs)]
        launch = [sys.executable, str(TORCHRUN), "--nproc-per-node", str(self.ranks), *logdir,
                  "--master-port", self.port, str(TRAIN)] + work
        if self.style == "torchrun":
            return launch
        if self.style == "bash":
            return ["bash", "-c", " ".join(f"'{a}'" for a in launch) + "; exit $?"]
        if self.style == "mindspore":
            script = (f"for i in $(seq 0 {self.ranks - 1}); do RANK_ID=$i DEVICE_ID=$i RANK_SIZE={self.ranks} "
                      f"'{sys.executable}' '{TRAIN}' {' '.join(work)} > '{self.logs}'/rank$i.log 2>&1 & done; wait")
            return ["bash", "-c", script]
        raise ValueError(self.style)

    def start(self) -> "TrainJob":
        if self.shared_log:
            with open(self.logs / "train.log", "ab") as out:
                self.proc = subprocess.Popen(self.argv(), env=self.env, start_new_session=True, stdout=out,
                                             stderr=subprocess.STDOUT)
            wait_for(lambda: (self.logs / "train.log").read_text().count(" iteration ") >= self.ranks,
                     timeout=30, what="the ranks logging")
            return self
        # The launcher's own output in `launcher.log` (what a job script's redirection does).
        with open(self.root / "launcher.log", "ab") as out:
            self.proc = subprocess.Popen(self.argv(), env=self.env, start_new_session=True,
                                         stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: all((self.logs / f"rank{r}.log").exists() and (self.logs / f"rank{r}.log").stat().st_size
                             for r in range(self.ranks)), timeout=30, what="every rank logging")
        return self

    def nan(self, rank: int) -> None:
        (self.ctl / f"nan-{rank}").touch()

    def exit_rank(self, rank: int) -> None:
        (self.ctl / f"exit-{rank}").touch()

    def oom(self, rank: int) -> None:
        """The rank prints torch_npu's out-of-memory traceback and exits 1."""
        (self.ctl / f"npuoom-{rank}").touch()

    def rank_pids(self) -> List[int]:
        """The launcher's children (the ranks), sorted."""
        assert self.proc is not None
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True).stdout
        return sorted(int(x) for x in out.split())

    def finish(self) -> None:
        (self.ctl / "finish").touch()

    def wait(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.1)

    def __enter__(self) -> "TrainJob":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MemoryCgroup:
    """A fresh memory cgroup with a small limit (v2 `memory.max`, else v1 `memory.limit_in_bytes`)
    holding only the processes moved into it: a real OOM kill of exactly those. Removed on exit."""

    def __init__(self, limit_bytes: int):
        self.limit = limit_bytes
        name = f"npu-watchdog-test-{uuid.uuid4().hex[:8]}"
        v2 = Path("/sys/fs/cgroup")
        if "memory" in _read(v2 / "cgroup.controllers").split():
            self.path, self.limit_file = v2 / name, "memory.max"
        elif (v2 / "memory" / "memory.limit_in_bytes").exists():
            self.path, self.limit_file = v2 / "memory" / name, "memory.limit_in_bytes"
        else:
            raise RuntimeError("no memory cgroup controller on this machine")

    def __enter__(self) -> "MemoryCgroup":
        self.path.mkdir()
        (self.path / self.limit_file).write_text(str(self.limit))
        return self

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def __exit__(self, *exc: object) -> None:
        wait_for(lambda: not _read(self.path / "cgroup.procs").strip(), timeout=30, what="cgroup empty")
        self.path.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def memory_cgroups_usable() -> bool:
    try:
        with MemoryCgroup(64 << 20):
            return os.geteuid() == 0
    except (OSError, RuntimeError):
        return False

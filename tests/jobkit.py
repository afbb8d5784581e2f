"""Real training-job process trees for discovery tests (no /proc mocks).

`TrainJob` starts the torchrun-like launcher (tests/fakes/trainjob/torchrun), the same under a
`bash -c` wrapper, or a MindSpore-style shell loop (RANK_ID/DEVICE_ID), with the ranks' stdout in
per-rank files. Every job carries a unique `NPU_WATCHDOG_TEST_JOB` tag in its ranks' environment,
so a daemon or `discover` restricted with `discovery.only_env` sees this test's job only, even
when other tests run training processes on the same machine.

`FakeNpuNode` is the fake npu-smi of such a node, its process table following the jobs' ranks;
`ShippedDaemon` runs the daemon on the zero-config path (the shipped example config);
`ShippedNode` is that daemon with its two receivers and a fake npu-smi the test steers
(`write_scenario`), shared by the rows of a scenario file that count messages row by row.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import psutil

from tests.fakes.receivers import Receiver
from tests.helpers import REPO, free_port, http_get, wait_for

FAKES = REPO / "tests" / "fakes" / "trainjob"
TORCHRUN = FAKES / "torchrun"
TRAIN = FAKES / "train.py"
TAG = "NPU_WATCHDOG_TEST_JOB"


class TrainJob:
    def __init__(self, root: Path, ranks: int = 4, style: str = "torchrun", workers: int = 0,
                 env: Optional[Dict[str, str]] = None, tag: Optional[str] = None, port: str = "29500",
                 shared_log: bool = False, first_device: int = 0, flavor: str = "torchrun", quiet: bool = False,
                 max_restarts: int = 0, no_reap: bool = False):
        self.root = Path(root)
        self.logs = self.root / "logs"
        self.ctl = self.root / "ctl"
        for d in (self.logs, self.ctl):
            d.mkdir(parents=True, exist_ok=True)
        self.ranks, self.style, self.workers, self.port = ranks, style, workers, port
        #: torchrun style: one file (logs/train.log) for the launcher's and every rank's output,
        #: as `torchrun ... > train.log 2>&1` makes it, instead of a file per rank.
        self.shared_log = shared_log
        #: MindSpore style: rank i gets DEVICE_ID first_device + i.
        self.first_device = first_device
        self.tag = tag or f"t-{uuid.uuid4().hex[:12]}"
        #: The fake launcher's reporting (torchrun, mpirun, deepspeed) and whether it reports at all.
        self.flavor, self.quiet = flavor, quiet
        #: torch elastic's `--max-restarts`: a failed rank restarts the whole group while any are left.
        self.max_restarts = max_restarts
        #: The launcher never reaps its ranks: one that exits stays a zombie.
        self.no_reap = no_reap
        self.env = dict(os.environ, FAKE_TRAIN_CONTROL=str(self.ctl), **{TAG: self.tag}, **(env or {}))
        self.env.pop("RANK", None)
        self.proc: Optional[subprocess.Popen] = None

    @property
    def only_env(self) -> str:
        return f"{TAG}={self.tag}"

    def argv(self) -> List[str]:
        work = ["--workers", str(self.workers)] if self.workers else []
        logdir = [] if self.shared_log else ["--log-dir", str(self.logs)]
        flavor = (["--flavor", self.flavor] if self.flavor != "torchrun" else []) + (["--quiet"] if self.quiet else [])
        flavor += ["--max-restarts", str(self.max_restarts)] if self.max_restarts else []
        flavor += ["--no-reap"] if self.no_reap else []
        launch = [sys.executable, str(TORCHRUN), "--nproc-per-node", str(self.ranks), *logdir,
                  "--master-port", self.port, *flavor, str(TRAIN)] + work
        if self.style == "torchrun":
            return launch
        if self.style == "bash":
            return ["bash", "-c", " ".join(f"'{a}'" for a in launch) + "; exit $?"]
        if self.style == "mindspore":
            script = (f"for i in $(seq 0 {self.ranks - 1}); do RANK_ID=$i DEVICE_ID=$((i + {self.first_device})) RANK_SIZE={self.ranks} "
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

    def hccl_fail(self, rank: int, times: int) -> None:
        """The rank prints an HCCL notify-wait timeout and exits 1, `times` times across restarts."""
        (self.ctl / f"hcclfail-{rank}").write_text(str(times))

    def quit_rank(self, rank: int) -> None:
        """The rank exits 0 at once, silently (no failure, but its peers still run)."""
        (self.ctl / f"quit-{rank}").touch()

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

    def hang(self) -> None:
        """Every rank blocks as in a collective that never returns, until `resume`."""
        (self.ctl / "hang").touch()

    def resume(self) -> None:
        (self.ctl / "hang").unlink()

    @property
    def hung(self) -> bool:
        return (self.ctl / "hang").exists() or any(self.ctl.glob("oomcascade-*"))

    @property
    def pausing(self) -> bool:
        """In a checkpoint or an evaluation (pace mode): the NPUs wait."""
        return (self.ctl / "checkpoint").exists() or (self.ctl / "eval").exists()

    @property
    def slow_ranks(self) -> Optional[set]:
        """None: the job runs at its pace; an empty set: every rank slower (`slow`); else the ranks
        whose chips compute longer (`slow-<rank>`)."""
        names = [p.name for p in self.ctl.glob("slow*")]
        if not names:
            return None
        return {int(n.split("-", 1)[1]) for n in names if n.startswith("slow-")}

    @staticmethod
    def aicore(rank: int, slow: Optional[set]) -> int:
        """AI Core % of a training rank's chip: in synchronous training the slow rank's chip
        computes while its peers wait for it in the collective (busier than theirs); a slower
        input pipeline leaves every chip waiting alike."""
        if slow is None:
            return 85
        if not slow:
            return 68
        return 95 if rank in slow else 72

    def slow(self, factor: float = 1.2, rank: Optional[int] = None) -> None:
        """Every rank steps `factor` slower, because of `rank`'s chip (None: the input pipeline)."""
        (self.ctl / ("slow" if rank is None else f"slow-{rank}")).write_text(str(factor))

    def phase(self, name: str, on: bool) -> None:
        """A checkpoint or an evaluation begins (`on`) or ends (pace mode)."""
        path = self.ctl / name
        if on:
            path.touch()
        else:
            path.unlink()

    def oom_cascade(self, rank: int) -> None:
        """That rank dies of NPU out of memory; its peers report an HCCL timeout and block."""
        (self.ctl / f"oomcascade-{rank}").touch()

    def ranks_by_number(self) -> Dict[int, int]:
        """rank -> pid of the live rank processes (the launcher's or the shell's children)."""
        out: Dict[int, int] = {}
        if self.proc is None:
            return out
        try:
            kids = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return out
        for k in kids:
            try:
                env = k.environ()
                if k.status() == psutil.STATUS_ZOMBIE:
                    continue
            except (psutil.Error, OSError):
                continue
            rank = env.get("RANK", env.get("RANK_ID"))
            if rank is not None and env.get(TAG) == self.tag:
                out[int(rank)] = k.pid
        return out

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


class FakeNpuNode:
    """The fake npu-smi of a node whose process table follows the jobs' ranks (a thread rewrites
    its scenario every 0.2 s): each placed job holds NPUs first..first+ranks-1 (rank r on
    first+r); a live rank is listed on its NPU, which is busy while its job trains and idle
    (AI Core 0) while it hangs; a lost card vanishes from the table. `present=False` keeps
    npu-smi off PATH until `install()` (a driver mounted after boot)."""

    def __init__(self, root: Path, npus: int = 8, present: bool = True):
        self.root = Path(root)
        self.bin = self.root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.scenario = self.root / "npu-smi.json"
        self.npus = npus
        self.jobs: List[tuple] = []
        self.lost: set = set()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # The follower thread and the test (place, lose) both rewrite the scenario through one
        # temporary file: one at a time, or a rename finds the other's file gone and the follower
        # dies, leaving npu-smi frozen (a hung job's NPUs then look busy).
        self._writing = threading.Lock()
        self.refresh()
        if present:
            self.install()

    def install(self) -> None:
        link = self.bin / "npu-smi"
        if not link.exists():
            link.symlink_to(REPO / "tests" / "fakes" / "npu-smi")

    def env(self) -> Dict[str, str]:
        return {"PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "FAKE_NPU_SMI_SCENARIO": str(self.scenario)}

    def place(self, job: TrainJob, first_npu: int, listed: bool = True) -> None:
        """`listed=False`: npu-smi lists none of the job's processes (as inside a container);
        only the ranks' device variables say where they run."""
        self.jobs.append((job, first_npu, listed))
        self.refresh()

    def lose(self, npu: int) -> None:
        self.lost.add(npu)
        self.refresh()

    def refresh(self) -> None:
        devices: Dict[str, Dict] = {str(n): {"aicore": 0, "hbm_used_mb": 3400} for n in range(self.npus)}
        processes = []
        for job, first, listed in self.jobs:
            busy = not job.hung and not job.pausing
            slow = job.slow_ranks
            for rank, pid in job.ranks_by_number().items():
                npu = first + rank
                devices[str(npu)] = {"aicore": job.aicore(rank, slow) if busy else 0, "hbm_used_mb": 41000}
                if listed:
                    processes.append({"npu": npu, "chip": 0, "pid": pid, "name": "python3", "memory_mb": 40000})
        for n in self.lost:
            devices[str(n)] = {"gone": True}
        doc = {"generate": {"npus": self.npus}, "devices": devices, "processes": processes}
        tmp = self.scenario.with_suffix(".tmp")
        with self._writing:
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.scenario)

    def _follow(self) -> None:
        while not self._stop.wait(0.2):
            self.refresh()

    def __enter__(self) -> "FakeNpuNode":
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


SHIPPED = REPO / "config" / "npu-watchdog.example.yaml"


class ShippedDaemon:
    """The daemon on the zero-config path: the shipped example config (no `job`, `probes` or
    paths; only `overrides` of time constants merged in, when a test must be shorter), with the
    environment variables it reads: listen address, the two channels' URLs, and the discovery
    scope that keeps other tests' training processes out of view."""

    def __init__(self, root: Path, env: Dict[str, str], only_env: str, feishu: str, webhook: str,
                 overrides: Optional[Dict] = None, prefix: Sequence[str] = ()):
        """`prefix`: a command the daemon runs under (e.g. `setpriv` dropping a capability)."""
        import yaml

        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = SHIPPED
        if overrides:
            doc = yaml.safe_load(SHIPPED.read_text())
            _merge(doc, overrides)
            config = self.root / "config.yaml"
            config.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.env = dict(os.environ, **env, NPU_WATCHDOG_LISTEN=f"127.0.0.1:{self.port}",
                        NPU_WATCHDOG_DISCOVERY_ONLY=only_env, FEISHU_WEBHOOK_URL=feishu, OPS_WEBHOOK_URL=webhook)
        self.env.pop("RANK", None)
        self.log_path = self.root / "daemon.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "watchdog", "run", "-c", str(config),
                                      "--state-dir", str(self.root / "state")], env=self.env, stdout=self._log,
                                     stderr=self._log, cwd=str(REPO))

    def get(self, path: str) -> str:
        assert self.proc.poll() is None, self.log_path.read_text()
        return http_get(self.url + path)[1]

    def status(self) -> Dict:
        return json.loads(self.get("/api/status"))

    def jobs(self) -> List[Dict]:
        try:
            return self.status()["discovery"]["jobs"]
        except OSError:
            return []

    def findings(self) -> List[Dict]:
        return self.status()["findings"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def __enter__(self) -> "ShippedDaemon":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_scenario(path: Path, pids: List[int]) -> None:
    """npu-smi's view: busy chips with the ranks' processes on them, or idle and freed."""
    doc = {"generate": {"npus": 8, "aicore": 60 if pids else 0},
           "processes": [{"npu": n, "chip": 0, "pid": pid, "name": "python3", "memory_mb": 30000}
                         for n, pid in enumerate(pids)]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def fake_npu_smi(root: Path) -> Tuple[Dict[str, str], Path]:
    """The environment that puts the fake npu-smi first on PATH, reading the scenario file it
    returns (write it with `write_scenario`; idle chips, no process, to begin with)."""
    bindir = Path(root) / "bin"
    bindir.mkdir(parents=True)
    (bindir / "npu-smi").symlink_to(REPO / "tests" / "fakes" / "npu-smi")
    scenario = Path(root) / "npu.json"
    write_scenario(scenario, [])
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_NPU_SMI_SCENARIO": str(scenario)}, scenario


class ShippedNode:
    """A `ShippedDaemon` with a Feishu and an ops-webhook receiver and a fake npu-smi whose table
    the test writes (`write_scenario(node.scenario, pids)`), shared by several rows of one file:
    each row starts its own job (`job`), waits until the daemon follows it (`follow`), marks where
    its messages start (`start_row`) and counts only those (`counts`, `messages`, `hook_alerts`)."""

    def __init__(self, root: Path, prefix: Sequence[str] = (), overrides: Optional[Dict] = None):
        self.root = Path(root)
        #: The command the daemon runs under (see ShippedDaemon), and time constants merged into
        #: the shipped config when a test must be shorter.
        self.prefix, self.overrides = tuple(prefix), overrides
        self.tag = f"t-{uuid.uuid4().hex[:12]}"
        env, self.scenario = fake_npu_smi(self.root)
        self.env = env
        self.feishu = Receiver("feishu").start()
        self.hook = Receiver("webhook").start()
        self.daemon = self._start_daemon()
        self.url = self.daemon.url
        self.mark = (0, 0)
        self.files = 0
        self.port_seq = 29600 + os.getpid() % 200

    def status(self) -> Dict:
        return self.daemon.status()

    def _start_daemon(self) -> "ShippedDaemon":
        return ShippedDaemon(self.root, self.env, f"{TAG}={self.tag}", self.feishu.url, self.hook.url,
                             overrides=self.overrides, prefix=self.prefix)

    def wait_up(self) -> "ShippedNode":
        """Up, and every probe's first round done: a job started before that is one the daemon
        found running at its start (read from the end of its files, judged as such), not a new one."""
        wait_for(lambda: self.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        wait_for(lambda: all(p["runs_total"] >= 1 for p in self.status()["probes"]), timeout=60,
                 what="every probe's first round")
        return self

    def restart_daemon(self, meanwhile: Optional[Callable[[], None]] = None) -> None:
        """Stop the daemon (SIGTERM, as systemd does), run `meanwhile` (what happens while it is
        down) and start it again on the same state."""
        self.daemon.stop()
        if meanwhile is not None:
            meanwhile()
        self.daemon = self._start_daemon()
        self.url = self.daemon.url
        self.wait_up()

    def findings(self, job: str, rule: str) -> List[Dict]:
        return [f for f in self.status().get("findings", [])
                if f["rule"] == rule and f["labels"].get("training_job") == job]

    def job(self, name: str, ranks: int = 4, flavor: str = "torchrun", quiet: bool = False, max_restarts: int = 0,
            shared_log: bool = False, no_reap: bool = False, folder: Optional[str] = None, **env: str) -> TrainJob:
        """A job named `name` in its own folder, or in `folder` (a relaunch into an earlier run's)."""
        self.port_seq += 1
        return TrainJob(self.root / (folder or name), ranks=ranks, tag=self.tag, port=str(self.port_seq),
                        env={"NPU_WATCHDOG_JOB": name, **env}, flavor=flavor, quiet=quiet, max_restarts=max_restarts,
                        shared_log=shared_log, no_reap=no_reap)

    def follow(self, job: TrainJob, name: str) -> None:
        """The ranks on the chips (npu-smi's table), and the daemon following them and their logs."""
        pids = wait_for(lambda: job.rank_pids() if len(job.rank_pids()) == job.ranks else None,
                        what="rank processes")
        write_scenario(self.scenario, pids)
        key = f'npu_watchdog_job_ranks_alive{{training_job="{name}"}}'
        wait_for(lambda: f"{key} {float(job.ranks)}" in http_get(self.url + "/metrics")[1], timeout=60,
                 what=f"{name}: ranks followed")
        # The logs probe follows the rank files (an ended job's files stay followed for
        # `forget_after`, so the count grows by each job's ranks), then reads them once more.
        self.files += 1 if job.shared_log else job.ranks
        wait_for(lambda: self.metric('npu_watchdog_log_files_followed{source="train"}') >= self.files, timeout=60,
                 what=f"{name}: rank logs followed")
        time.sleep(4)

    def metric(self, key: str) -> float:
        for line in http_get(self.url + "/metrics")[1].splitlines():
            if line.startswith(key + " "):
                return float(line.split()[-1])
        return 0.0

    def start_row(self) -> None:
        self.mark = (len(self.feishu.accepted()), len(self.hook.accepted()))

    def messages(self) -> Dict[str, List[Dict]]:
        return {"feishu": [r for r in self.feishu.accepted()[self.mark[0]:]],
                "hook": [r.json for r in self.hook.accepted()[self.mark[1]:]]}

    def counts(self) -> Dict[str, Dict[str, int]]:
        m = self.messages()
        hook = {s: sum(1 for x in m["hook"] if x["status"] == s) for s in ("firing", "resolved")}
        return {"feishu": len(m["feishu"]), "hook": hook}

    def hook_alerts(self, status: str = "firing") -> List[Dict[str, str]]:
        return [a["labels"] for x in self.messages()["hook"] if x["status"] == status for a in x["alerts"]]

    def stop(self) -> None:
        try:
            self.daemon.stop()
        finally:
            self.feishu.stop()
            self.hook.stop()


def _merge(base: Dict, over: Dict) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def sent(webhook, feishu) -> Dict[str, Dict[str, int]]:
    """Messages received per channel and status: the webhook's by rule too ("webhook:<rule>"),
    a webhook message counting once for each rule it carries."""
    out: Dict[str, Dict[str, int]] = {"webhook": {"firing": 0, "resolved": 0}, "feishu": {"firing": 0, "resolved": 0}}
    for r in webhook.accepted():
        body = r.json
        out["webhook"][body["status"]] += 1
        for rule in sorted({a["labels"]["alertname"] for a in body["alerts"]}):
            out.setdefault(f"webhook:{rule}", {"firing": 0, "resolved": 0})[body["status"]] += 1
    for r in feishu.accepted():
        out["feishu"]["resolved" if r.json["card"]["header"]["template"] == "green" else "firing"] += 1
    return out


def webhook_labels(webhook) -> List[Dict[str, str]]:
    return [dict(a["labels"], _status=r.json["status"]) for r in webhook.accepted() for a in r.json["alerts"]]

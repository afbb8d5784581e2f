"""Shared test machinery: run the real daemon as a subprocess and talk to it over HTTP."""

from __future__ import annotations

import contextlib
import html
import logging
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import yaml

from watchdog.demo.ports import free_port  # a port outside the ephemeral range: watchdog/demo/ports.py says why

REPO = Path(__file__).resolve().parent.parent
# The tests folder: kits, fakes, fixtures and samples live here (test files live in its tier folders).
TESTS = REPO / "tests"
# Real captures and log excerpts copied into the repository (each folder has a SOURCES.md).
FIXTURES = REPO / "tests" / "fixtures"


def http_get(url: str, timeout: float = 5.0) -> tuple:
    """(status, body text); never raises for HTTP error statuses."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8")


_LINK = re.compile(r"https?://[^\s<>|\"'`()\[\]]+")


def message_links(body: Any) -> List[str]:
    """Every http(s) link anywhere in a sent message (Slack `<url|label>`, Feishu buttons,
    webhook annotations, ...), in order, each once."""
    out: List[str] = []
    for url in _LINK.findall(json.dumps(body, ensure_ascii=False).replace("\\/", "/")):
        url = html.unescape(url.rstrip(".,;"))
        if url not in out:
            out.append(url)
    return out


def check_link(url: str) -> Optional[str]:
    """Why a link does not work for a reader (None when it does): it must answer 200, and its
    #anchor must be an element id on the page."""
    base, _, anchor = url.partition("#")
    status, text = http_get(base)
    if status != 200:
        return f"{url}: HTTP {status}"
    if anchor and f'id="{anchor}"' not in text:
        return f"{url}: no element with id {anchor!r}"
    return None


#: wait_for's polling without an `interval` of the test's own: quick at first, then slower. Most
#: predicates ask the daemon (/metrics, /api/status: a few ms of CPU on each side); polled every
#: 0.1 s through waits of tens of seconds by 8-12 workers, they took a good share of a 2-core
#: machine. A condition met at once is still seen within 0.05 s, a long wait ends at most 0.3 s late.
POLL_FIRST, POLL_MAX = 0.05, 0.3


def wait_for(pred: Callable[[], Any], timeout: float = 60.0, interval: Optional[float] = None,
             what: str = "condition") -> Any:
    """Poll `pred` until it is true (every `interval` seconds, or see POLL_FIRST). The deadline is
    generous on purpose (a hang bound, not a speed figure): a loaded 2-core machine running the
    tiers in parallel stretches every wait."""
    deadline = time.monotonic() + timeout
    last = None
    pause = POLL_FIRST if interval is None else interval
    while time.monotonic() < deadline:
        try:
            last = pred()
        except Exception as exc:  # keep polling through transient errors
            last = exc
        else:
            if last:
                return last
        time.sleep(pause)
        if interval is None:
            pause = min(POLL_MAX, pause * 1.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def duplicate_series(text: str) -> list:
    """Series that appear more than once with one label set in a /metrics text (Prometheus
    silently keeps one of them): must always be empty."""
    import collections

    keys = [line.rpartition(" ")[0] for line in text.splitlines() if line and not line.startswith("#")]
    return [k for k, n in collections.Counter(keys).items() if n > 1]


def demo_run(out: Path, **kw: Any):
    """A simulated node (4 NPUs, the demo's time constants at speed 1) with the real daemon, as the
    e2e tests use it: quiet (its narration goes to a string), stopped with `close()`."""
    import io

    from watchdog.demo.scenario import DemoRun

    kw.setdefault("speed", 1.0)
    kw.setdefault("npus", 4)
    return DemoRun(Path(out), echo=False, stream=io.StringIO(), **kw)


def parse_metrics(text: str) -> Dict[str, float]:
    """`name{labels}` -> value, from the Prometheus text format (labels sorted as served)."""
    out: Dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


class Daemon:
    """`npu-watchdog run` as a real subprocess with a temporary config and a free port."""

    def __init__(self, tmp: Path, config: Dict[str, Any], env: Optional[Dict[str, str]] = None,
                 extra_args: tuple = (), wrapper: tuple = ()):
        self.tmp = Path(tmp)
        self.port = free_port()
        cfg = dict(config)
        cfg.setdefault("node", {"name": "node-t"})
        cfg.setdefault("job", {"name": "job-t"})
        cfg.setdefault("paths", {"state_dir": str(self.tmp / "state")})
        cfg["http"] = {"listen": f"127.0.0.1:{self.port}"}
        self.config = cfg
        self.config_path = self.tmp / "config.yaml"
        self.write_config(cfg)
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.extra_args = extra_args
        #: A command the daemon runs under (e.g. `setpriv ...` to drop capabilities).
        self.wrapper = tuple(wrapper)
        self.stderr_path = self.tmp / f"daemon-{int(time.time() * 1000)}.log"
        self.proc: Optional[subprocess.Popen] = None

    def write_config(self, cfg: Dict[str, Any]) -> None:
        self.config_path.write_text(yaml.safe_dump(cfg, sort_keys=False))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> "Daemon":
        self._err = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(
            [*self.wrapper, sys.executable, "-m", "watchdog", "run", "-c", str(self.config_path), *self.extra_args],
            stdout=self._err, stderr=self._err, env=self.env, cwd=str(REPO),
        )
        if wait:
            wait_for(lambda: self.alive() and http_get(self.url + "/healthz")[0] in (200, 503),
                     timeout=60, what="daemon /healthz")
        return self

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"daemon exited ({self.proc and self.proc.returncode}):\n{self.log()}")
        return True

    def metrics(self) -> Dict[str, float]:
        code, body = http_get(self.url + "/metrics")
        assert code == 200, body
        return parse_metrics(body)

    def metrics_text(self) -> str:
        return http_get(self.url + "/metrics")[1]

    def status(self) -> Dict[str, Any]:
        code, body = http_get(self.url + "/api/status")
        assert code == 200, f"{code} {body}; the daemon's log ends:\n{self.log()[-3000:]}"
        return json.loads(body)

    def log(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        return self.proc.returncode

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self._err.close()

    def __enter__(self) -> "Daemon":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Server:
    """A server subprocess, its output in a file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, argv: List[str], log: Path, env: Optional[Dict[str, str]] = None):
        self.log_path = log
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO), env=env)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.log_path.name}: exited ({self.proc.returncode}):\n{self.log()}")
        return True

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class ProcView:
    """A /proc that shows only the given processes: a folder of links `<pid>` -> the real
    `/proc/<pid>` (plus `uptime`), for tests that scan the process table. Why: the real /proc of
    a shared machine changes under a test (other work starts, execs and ends processes), so a
    test that counts what a scan read must see only its own processes."""

    def __init__(self, root: Path, pids=()) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.symlink("/proc/uptime", self.root / "uptime")
        for pid in pids:
            self.add(pid)

    @property
    def path(self) -> str:
        return str(self.root)

    def add(self, pid: int) -> int:
        os.symlink(f"/proc/{pid}", self.root / str(pid))
        return pid


def own_processes_only(monkeypatch: Any) -> None:
    """Make `psutil.process_iter` list only this test process and its descendants, for tests of
    code that walks the process table with psutil (the process probe). Why: like ProcView for
    /proc readers: on a shared machine (and in parallel test workers) other jobs with the same
    command lines come and go, and a test must judge only the processes it started."""
    import psutil

    real = psutil.process_iter

    def scoped(*args: Any, **kwargs: Any) -> Any:
        me = psutil.Process(os.getpid())
        keep = {me.pid} | {c.pid for c in me.children(recursive=True)}
        return (p for p in real(*args, **kwargs) if p.pid in keep)

    monkeypatch.setattr(psutil, "process_iter", scoped)


def run_cli(*args: str, env: Optional[Dict[str, str]] = None, timeout: float = 60) -> "subprocess.CompletedProcess":
    """`npu-watchdog ARGS...` as a subprocess of this checkout (text output captured)."""
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True,
                          cwd=str(REPO), env=env, timeout=timeout)


@contextlib.contextmanager
def logged(name: str, level: int = logging.INFO) -> Iterator[List[logging.LogRecord]]:
    """The records logger `name` emits at `level` and above, by a handler of its own: another
    test in the same worker may have configured the logging tree (a dictConfig disables the
    loggers that existed then), so pytest's caplog cannot be relied on; enabled for the block."""
    records: List[logging.LogRecord] = []
    handler = logging.Handler(level)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    saved = logger.level, logger.disabled, logging.root.manager.disable
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.disabled = False
    logging.disable(logging.NOTSET)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.disabled = saved[1]
        logging.disable(saved[2])


#: OpenSSL's libraries, as the dynamic loader names them in /proc/PID/maps.
OPENSSL = ("libssl", "libcrypto")


def openssl_mapped(pid: int) -> List[str]:
    """The OpenSSL libraries process `pid` has loaded (an idle daemon has none: watchdog.compat)."""
    with open(f"/proc/{pid}/maps") as fh:
        return sorted({line.split("/")[-1].strip() for line in fh if "/lib" in line and any(n in line for n in OPENSSL)})

"""The interpreters of this machine and the offline bundle, shared by the tests that install the
daemon on each Python (tests/e2e/test_pythons.py) and check the bundle (tests/daemon/test_bundle.py).

The bundle (both architectures, every Python) is built once per test run, under a file lock in
the run's temporary folder: `make test` builds it beside the test session (`prebuild`, the folder in
NPU_WATCHDOG_TEST_SHARED); otherwise whichever worker asks first builds it and the others wait and
reuse it. The same goes for the flit_core wheels a source install of the heartbeat package builds
with, so that install needs no package index either.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tarfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import pytest

from tests.helpers import REPO, Daemon, http_get, wait_for

SCRIPT = REPO / "scripts" / "bundle.py"
#: tarfile's safe extraction filter where this Python has it (3.12+, and security releases before).
SAFE = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _bundle_module() -> Any:
    spec = importlib.util.spec_from_file_location("npu_watchdog_bundle_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


#: The Pythons the daemon supports, oldest first (the bundle script's list is the one truth).
PYTHONS = tuple(_bundle_module().PYTHONS)
OLDEST = PYTHONS[0]
#: Where an interpreter is missing, what provides it (the skip reason says so).
HOW_TO_GET = "pyenv install {v}, or the distribution's python{v} package"


def find_python(version: str) -> Optional[str]:
    """A CPython `version` (MAJOR.MINOR) of this machine with venv: pyenv's first (its shims
    are skipped: they answer for whichever version is selected), then PATH."""
    root = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv")))
    found = sorted(root.glob(f"versions/{version}.*/bin/python{version}"),
                   key=lambda p: [int(x) if x.isdigit() else 0 for x in p.parent.parent.name.split(".")], reverse=True)
    on_path = shutil.which(f"python{version}")
    if on_path and "shims" not in Path(on_path).parts:
        found.append(Path(on_path))
    for exe in found:
        r = subprocess.run([str(exe), "-c", "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0 and r.stdout.strip() == version:
            return str(exe)
    return None


def need_python(version: str) -> str:
    exe = find_python(version)
    if exe is None:
        pytest.skip(f"no CPython {version} with venv on this machine ({HOW_TO_GET.format(v=version)})")
    return exe


#: A folder of builds made beside the test session (`make test` builds them while the tests run,
#: see `prebuild`); without it the first test that needs one builds it.
SHARED_ENV = "NPU_WATCHDOG_TEST_SHARED"


def run_folder(tmp_path_factory: Any) -> Path:
    """A folder shared by every worker of this test run (and by nothing else)."""
    pre = os.environ.get(SHARED_ENV)
    if pre:
        folder = Path(pre)
    else:
        base = Path(tmp_path_factory.getbasetemp())
        folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-builds"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _index_unreachable(scratch: Path) -> bool:
    """Whether pip cannot reach a package index at all (a tiny download fails): only then is a
    failed build a skip, never when the index answers that something is missing."""
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "-d", str(scratch), "six"], capture_output=True, text=True, timeout=300)
    return r.returncode != 0


def shared_bundles(tmp_path_factory: Any) -> Dict[str, Path]:
    """arch -> the bundle tarball of this checkout, built once per run (skips without an index)."""
    folder = run_folder(tmp_path_factory) / "bundles"
    folder.mkdir(exist_ok=True)
    with _locked(folder / ".lock"):
        skip, done = folder / "SKIP", folder / "DONE"
        if not done.exists() and not skip.exists():
            r = subprocess.run([sys.executable, str(SCRIPT), "build", "--out", str(folder / "dist")],
                               capture_output=True, text=True, timeout=1800)
            if r.returncode != 0 and _index_unreachable(folder / "probe"):
                skip.write_text(f"no package index reachable for pip: {r.stderr.strip().splitlines()[-1]}")
            else:
                assert r.returncode == 0, r.stdout + r.stderr
                done.write_text(r.stdout)
        if skip.exists():
            pytest.skip(skip.read_text())
        made = [Path(line) for line in done.read_text().split()]
    return {p.name.rsplit("-", 1)[1].split(".")[0]: p for p in made}


def unpacked_bundle(tmp_path_factory: Any) -> Path:
    """This machine's bundle, unpacked once per run (read only: install.sh writes nothing in it)."""
    bundles = shared_bundles(tmp_path_factory)
    if platform.machine() not in bundles:
        pytest.skip(f"no bundle is built for {platform.machine()}")
    folder = run_folder(tmp_path_factory) / "unpacked"
    with _locked(run_folder(tmp_path_factory) / ".unpack.lock"):
        if not folder.exists():
            scratch = folder.with_name("unpacking")
            shutil.rmtree(scratch, ignore_errors=True)
            with tarfile.open(bundles[platform.machine()]) as tar:
                tar.extractall(scratch, **SAFE)
            scratch.rename(folder)
    (top,) = folder.iterdir()
    return top


def flit_wheels(tmp_path_factory: Any) -> Path:
    """flit_core wheels for every Python (3.12 is the last for 3.7), downloaded once per run: a
    source install of the heartbeat package then builds with no index (`--no-index --find-links`)."""
    folder = run_folder(tmp_path_factory) / "flit"
    with _locked(run_folder(tmp_path_factory) / ".flit.lock"):
        if not (folder / "DONE").exists():
            for python in ("3.7", "3.8"):
                r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                                    "--python-version", python, "-d", str(folder), "flit_core>=3.12,<5"],
                                   capture_output=True, text=True, timeout=600)
                if r.returncode != 0 and _index_unreachable(folder / "probe"):
                    pytest.skip(f"no package index reachable for pip: {r.stderr.strip().splitlines()[-1]}")
                assert r.returncode == 0, r.stderr
            (folder / "DONE").write_text("")
    return folder


def offline(argv: Any, **kw: Any) -> subprocess.CompletedProcess:
    """`argv` with no package index: pip's configuration ignored and, where this runs as root with
    unshare, in a network namespace with loopback only (nothing beyond this machine reachable)."""
    kw["env"] = {**kw.get("env", os.environ), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    if os.geteuid() == 0 and shutil.which("unshare"):
        script = "ip link set lo up 2>/dev/null || true; exec \"$@\""
        argv = ["unshare", "--net", "sh", "-c", script, "sh", *argv]
    return subprocess.run(list(argv), capture_output=True, text=True, **kw)


def install(top: Path, root: Path, python: Optional[str], timeout: int = 900,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """The bundle's own install.sh into `root` (no systemctl), with no package index."""
    argv = ["sh", str(top / "install.sh"), "install", "--root", str(root), "--no-systemctl"]
    return offline(argv + (["--python", python] if python else []), timeout=timeout, env=env or dict(os.environ))


def paging_config(flag: Path, url: str) -> Dict[str, Any]:
    """One injected failure: a command check that fails while `flag` exists, paged to a webhook at
    `url` with short windows (the group window, resolve delay and retries of the alert tests)."""
    return {"probes": {"commands": [{"name": "flag", "argv": ["/bin/sh", "-c", f"test ! -e '{flag}'"],
                                     "interval": "1s", "timeout": "5s"}]},
            "alerting": {"group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms",
                         "retry_max": "1s", "channels": [{"type": "webhook", "name": "hook", "url": url}]}}


def venv_bin(root: Path) -> Path:
    return root / "opt" / "npu-watchdog" / "venv" / "bin"


class InstalledDaemon(Daemon):
    """`npu-watchdog run` from an installed venv (not this checkout's package): cwd is the test's
    folder, so nothing from the checkout can be imported by accident."""

    def __init__(self, tmp: Path, config: Dict[str, Any], exe: Path):
        super().__init__(tmp, config)
        self.exe = exe

    def start(self, wait: bool = True) -> "InstalledDaemon":
        self._err = open(self.stderr_path, "ab")
        env = {k: v for k, v in self.env.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        self.proc = subprocess.Popen([*self.wrapper, str(self.exe), "run", "-c", str(self.config_path)],
                                     stdout=self._err, stderr=self._err, env=env, cwd=str(self.tmp))
        if wait:
            wait_for(lambda: self.alive() and http_get(self.url + "/healthz")[0] in (200, 503),
                     timeout=120, what="daemon /healthz")
        return self


def prebuild(folder: Path) -> int:
    """Build the bundle, unpack it and fetch the flit_core wheels into `folder`, under the same
    locks the tests take. Why: `make test` runs this beside the test session, whose tests on the
    bundle come after the other slow tests (tests/conftest.py), so they find the build made or
    nearly made; when the first test to need the bundle built it, every worker that started a
    bundle test waited for the build (7 of 8 for ~100 s). A step that fails or skips is left to
    the tests, which meet it again and report it."""
    os.environ[SHARED_ENV] = str(folder)
    status = 0
    for step in (unpacked_bundle, flit_wheels):
        try:
            step(None)
        except BaseException as exc:  # pytest's skip is a BaseException; the tests report it
            print(f"{step.__name__}: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    if sys.argv[1:2] != ["prebuild"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tests.pythons_kit prebuild FOLDER")
    sys.exit(prebuild(Path(sys.argv[2])))

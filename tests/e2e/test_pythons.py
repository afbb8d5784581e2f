"""The interpreter matrix: on every CPython the daemon supports (3.7-3.13; skipped, naming how to get
it, where this machine has no such interpreter), the offline bundle installs with no package
index, `check-config` accepts the shipped example config, and a short run of the installed daemon
pages one injected failure exactly once and resolves it once; on the oldest, the whole demo runs
with its exact message counts. The heartbeat package installs from source and from its wheel, and
writes a heartbeat, on each of them. One bundle serves the whole run (tests/pythons_kit.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.golden_kit import GOLDEN_DIR, step_key
from tests.helpers import REPO, openssl_mapped, wait_for
from tests.pythons_kit import (OLDEST, PYTHONS, InstalledDaemon, find_python, flit_wheels, install, need_python, offline,
                               paging_config, unpacked_bundle, venv_bin)
from watchdog import __version__

pytestmark = [pytest.mark.slow, pytest.mark.bundle]
SENT = 'npu_watchdog_notifications_total{channel="hook",result="sent"}'


def _version_of(exe: Path) -> str:
    r = subprocess.run([str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip()


def _page_once(tmp_path: Path, exe: Path) -> None:
    """One injected failure (a command check that fails while a flag file exists): one firing
    message, then one resolved, nothing else; labels as sent. Before it, the idle daemon holds no
    OpenSSL library (watchdog.compat.load_without_openssl, on this interpreter's libraries)."""
    tmp_path.mkdir(exist_ok=True)
    flag = tmp_path / "flag"
    with Receiver("webhook") as rx:
        d = InstalledDaemon(tmp_path, paging_config(flag, rx.url), exe).start()
        try:
            assert d.metrics()[SENT] == 0
            # Idle, on every interpreter: no OpenSSL (its first HTTPS send would load it).
            assert openssl_mapped(d.proc.pid) == [], d.log()[-3000:]
            flag.touch()
            (firing,) = rx.wait_for(1)
            flag.unlink()
            got = rx.wait_for(2, timeout=90)
            assert [r.json["status"] for r in got] == ["firing", "resolved"], [r.json for r in got]
            wait_for(lambda: d.metrics()[SENT] == 2, timeout=30, what="both deliveries recorded")
            (alert,) = firing.json["alerts"]
            assert alert["labels"]["alertname"] == "command_check" and alert["labels"]["training_job"] == "job-t"
            assert alert["labels"]["host"] == "node-t"
        finally:
            assert d.stop() == 0, d.log()[-3000:]
        assert len(rx.requests) == 2


# The whole demo first: it is the longest test on the bundle (about 110 s against 10-40 s for
# an install), and tests/conftest.py hands the bundle's tests out in this file's order once the
# slow ones have started; last, it ran alone for the final two minutes of `make test`.
@pytest.mark.timeout(1800)
def test_the_whole_demo_from_the_bundle_offline_on_the_oldest_supported_python_or_this_one(tmp_path, tmp_path_factory):
    """The bundle installed with no package index (pip's configuration ignored; and, where this
    runs as root with unshare, in a network namespace with loopback only), then `npu-watchdog
    demo` from it, on the oldest supported Python; where this machine has none, on the
    interpreter running the tests, so the offline install and demo are never left untested. The
    demo exits non-zero when any step sends more or fewer messages than it expects; its timeline
    says how many each step sent, checked here too."""
    python = find_python(OLDEST) or sys.executable
    top = unpacked_bundle(tmp_path_factory)
    root = tmp_path / "root"
    r = install(top, root, python)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # with the network cut, as on an air-gapped node (the demo's receiver is on loopback)
    r = offline([str(venv_bin(root) / "npu-watchdog"), "demo", "--quiet", "--out", str(out)],
                timeout=1500, cwd=str(tmp_path), env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    # every step's firing and resolved messages, per channel, as the golden of the demo has them
    steps = json.loads((out / "timeline.json").read_text())
    counts = {step_key(s["name"]): {"messages": s["messages"], "resolved": s["resolved"],
                                    "channels": {c: dict(sorted(v.items())) for c, v in sorted(s["channels"].items())}}
              for s in steps}
    golden = json.loads((GOLDEN_DIR / "demo_messages.json").read_text())
    assert counts == golden, json.dumps(counts, indent=1, sort_keys=True)
    assert sum(s["messages"] for s in steps) == 5 and sum(s["resolved"] for s in steps) == 4


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", PYTHONS)
def test_the_bundle_installs_offline_checks_its_config_and_pages_once(version, tmp_path, tmp_path_factory):
    python = need_python(version)
    top = unpacked_bundle(tmp_path_factory)
    root = tmp_path / "root"
    r = install(top, root, python)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _version_of(venv_bin(root) / "python") == version
    exe = venv_bin(root) / "npu-watchdog"
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith(f"npu-watchdog {__version__} (commit "), r.stdout + r.stderr
    # the bundle's name carries the commit the daemon says it was built from
    commit = r.stdout.split("(commit ")[1].rstrip(")\n")
    assert commit == "unknown" or f"-{commit}-linux-" in top.name, (commit, top.name)
    r = offline([str(exe), "check-config", "-c", str(root / "etc" / "npu-watchdog" / "config.yaml")],
                timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    _page_once(tmp_path / "run", exe)


def _beats(venv: Path, tmp_path: Path, step: int) -> dict:
    beats = tmp_path / f"hb-{step}"
    beats.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "NPU_WATCHDOG_HEARTBEAT": f"{beats}/", "RANK": "2"}
    r = subprocess.run([str(venv / "bin" / "python"), "-c",
                        f"import npu_watchdog_heartbeat as h; print(h.__version__); h.Heartbeat().beat(step={step}, loss=1.5)"],
                       capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == __version__, r.stdout + r.stderr
    return json.loads((beats / "rank2.json").read_text())


@pytest.mark.parametrize("version", PYTHONS)
def test_the_heartbeat_package_installs_from_source_and_from_its_wheel_and_beats(version, tmp_path, tmp_path_factory):
    """One venv of that Python: installed from source (pip builds it with flit_core, no index),
    it writes a heartbeat; uninstalled and installed from the bundle's wheel, it writes one again."""
    python = need_python(version)
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    src = tmp_path / "heartbeat"
    shutil.copytree(REPO / "contrib" / "heartbeat", src, ignore=shutil.ignore_patterns("build", "__pycache__"))
    (wheel,) = (unpacked_bundle(tmp_path_factory) / "wheels").glob("npu_watchdog_heartbeat-*.whl")
    for step, argv in ((1, ["--find-links", str(flit_wheels(tmp_path_factory)), str(src)]), (2, [str(wheel)])):
        r = offline([*pip, "install", *argv], timeout=600, cwd=str(tmp_path))
        assert r.returncode == 0, r.stdout + r.stderr
        beat = _beats(venv, tmp_path, step)
        assert beat["step"] == step and beat["loss"] == 1.5, beat
        r = subprocess.run([*pip, "uninstall", "--yes", "npu-watchdog-heartbeat"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr

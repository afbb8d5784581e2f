"""An upgrade from the last release's offline bundle to this checkout's keeps the alert state and
the silences: the 0.1.0 bundle (built here from the 0.1.0 commit's tree, with its own install.sh)
is installed, its daemon pages a failure once and gets a silence, the new bundle's install.sh
installs over it, and the new daemon neither pages the firing alert again nor forgets the silence,
and resolves the alert exactly once.
"""

from __future__ import annotations

import io
import json
import platform
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import REPO, wait_for
from tests.pythons_kit import InstalledDaemon, install, paging_config, unpacked_bundle, venv_bin
from watchdog import __version__

pytestmark = [pytest.mark.slow, pytest.mark.bundle]

#: The last release before this one: its version and commit (CHANGELOG.md).
PREVIOUS = ("0.1.0", "8b72c6caa2204c9dd09379a97247f2dfb952b07a")
#: The alerts_firing series of the injected failure (since 0.2.0 it also names its job: summed
#: over that label, whatever job the node's discovery sees).
FIRING = 'npu_watchdog_alerts_firing{rule="command_check",severity="warning"'


def firing(metrics: dict) -> float:
    return sum(v for k, v in metrics.items() if k.startswith(FIRING))


def _previous_tree(dest: Path) -> Path:
    """The previous release's files, from this repository's history."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the previous release's tree comes from the history")
    r = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS[1]], capture_output=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"no history of release {PREVIOUS[0]} ({PREVIOUS[1][:12]}) in this checkout: "
                    f"{r.stderr.decode(errors='replace').strip()[:200]}")
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        tar.extractall(dest)
    return dest


def _previous_bundle(tmp_path: Path, new_top: Path) -> Path:
    """The previous release's bundle for this machine and Python: its own two wheels built from
    its tree (pip builds them as a user would, with the build backend it declares), its
    install.sh, unit and example config, beside the dependency wheels of the new bundle (the same
    requirements resolve from them)."""
    tree = _previous_tree(tmp_path / "previous-src")
    top = tmp_path / f"npu-watchdog-{PREVIOUS[0]}-linux-{platform.machine()}"
    wheels = top / "wheels"
    shutil.copytree(new_top / "wheels", wheels, ignore=shutil.ignore_patterns("npu_watchdog-*", "npu_watchdog_heartbeat-*"))
    for src in (tree, tree / "contrib" / "heartbeat"):
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(src)],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0 and "Could not find a version" in r.stderr:
            pytest.skip(f"no package index for the previous release's build backend: {r.stderr.strip()[-200:]}")
        assert r.returncode == 0, r.stderr
    for name in ("install.sh", "README.md", "LICENSE"):
        shutil.copy2(tree / ("scripts" if name == "install.sh" else "") / name, top / name)
    shutil.copytree(tree / "systemd", top / "systemd")
    (top / "config").mkdir()
    shutil.copy2(tree / "config" / "npu-watchdog.example.yaml", top / "config")
    return top


def _cli(exe: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_an_upgrade_from_the_previous_bundle_keeps_the_alert_state_and_silences(tmp_path, tmp_path_factory):
    new_top = unpacked_bundle(tmp_path_factory)
    old_top = _previous_bundle(tmp_path, new_top)
    root = tmp_path / "root"
    r = install(old_top, root, sys.executable)
    assert r.returncode == 0, r.stdout + r.stderr
    exe = venv_bin(root) / "npu-watchdog"
    assert _cli(exe, "--version").stdout.strip() == f"npu-watchdog {PREVIOUS[0]}"

    flag, state = tmp_path / "flag", root / "var" / "lib" / "npu-watchdog"
    run = tmp_path / "run"
    run.mkdir()
    with Receiver("webhook") as rx:
        cfg = {**paging_config(flag, rx.url), "paths": {"state_dir": str(state)}}
        old = InstalledDaemon(run, cfg, exe).start()
        flag.touch()
        rx.wait_for(1)
        out = _cli(exe, "silence", "add", "-c", str(old.config_path), "--match", "rule=stall", "--for", "1d",
                   "--comment", "checkpoint storage swap")
        assert out.returncode == 0, out.stderr
        sid = out.stdout.split()[1]
        wait_for(lambda: old.metrics()["npu_watchdog_silences_active"] == 1, what="the silence in force")
        assert old.stop() == 0, old.log()[-3000:]

        r = install(new_top, root, sys.executable)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "keeping the existing" in r.stdout
        assert _cli(exe, "--version").stdout.startswith(f"npu-watchdog {__version__} (commit ")

        new = InstalledDaemon(run, cfg, exe).start()
        try:
            # the alert is still firing (restored from the state, not paged again), the silence is there
            wait_for(lambda: firing(new.metrics()) == 1, what="the alert restored as firing")
            wait_for(lambda: any(f["rule"] == "command_check" for f in new.status()["findings"]), what="the finding seen again")
            assert new.metrics()["npu_watchdog_silences_active"] == 1
            listed = json.loads(_cli(exe, "silence", "list", "-c", str(new.config_path), "--json").stdout)
            assert [s["id"] for s in listed] == [sid] and listed[0]["comment"] == "checkpoint storage swap"
            wait_for(lambda: new.metrics()["npu_watchdog_outbox_pending"] == 0, what="nothing left to send")
            assert len(rx.requests) == 1, [q.json for q in rx.requests]
            flag.unlink()
            got = rx.wait_for(2, timeout=90)
            assert [q.json["status"] for q in got] == ["firing", "resolved"]
        finally:
            assert new.stop() == 0, new.log()[-3000:]
        assert len(rx.requests) == 2

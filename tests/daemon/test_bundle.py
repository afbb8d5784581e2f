"""`make bundle`: offline install bundles. Built once (real pip downloads from the package index),
then: every requirement is present as a wheel for x86_64 and aarch64 and CPython 3.7-3.13 (checked
by `scripts/bundle.py check`, which never downloads), a bundle with a wheel missing is refused
naming it, and installing a bundle again replaces the daemon's code. That this machine's bundle
installs with no network at all and runs its whole demo there is tests/e2e/test_pythons.py's.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.pythons_kit import SAFE, install, shared_bundles

pytestmark = [pytest.mark.slow, pytest.mark.bundle]

SCRIPT = REPO / "scripts" / "bundle.py"


def bundle(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    # built once per test run, shared with the interpreter matrix (tests/e2e/test_pythons.py)
    made = shared_bundles(tmp_path_factory)
    assert set(made) == {"x86_64", "aarch64"}, made
    return made


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_each_bundle_is_complete_for_every_python(bundles, arch):
    r = bundle("check", str(bundles[arch]))
    assert r.returncode == 0 and r.stdout.strip().endswith("complete"), r.stdout + r.stderr
    with tarfile.open(bundles[arch]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"install.sh", "systemd/npu-watchdog.service", "config/npu-watchdog.example.yaml", "LICENSE",
            "README.md", "CHANGELOG.md", "PYTHONS"} <= names
    with tarfile.open(bundles[arch]) as tar:
        (pythons,) = [tar.extractfile(m).read().decode() for m in tar.getmembers() if m.name.endswith("/PYTHONS")]
    assert pythons.split() == ["3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13"]
    wheels = [n for n in names if n.startswith("wheels/")]
    assert any("npu_watchdog-" in n for n in wheels) and any("npu_watchdog_heartbeat-" in n for n in wheels)
    native = [n for n in wheels if "manylinux" in n]
    assert native and all(arch in n for n in native), native  # no other architecture's wheels


def test_a_bundle_missing_a_wheel_is_refused_naming_it(bundles, tmp_path):
    with tarfile.open(bundles["aarch64"]) as tar:
        tar.extractall(tmp_path, **SAFE)
    (top,) = tmp_path.iterdir()
    for wheel in (top / "wheels").glob("pydantic_core-*cp310*"):
        wheel.unlink()
    r = bundle("check", str(top), "--python", "3.10", "--python", "3.11")
    assert r.returncode == 1 and "incomplete" in r.stdout, r.stdout + r.stderr
    assert "CPython 3.10" in r.stderr and "pydantic" in r.stderr.lower() and "3.11" not in r.stderr, r.stderr


# The bundle installed with no network and its whole demo run from it, message counts checked
# against the golden: tests/e2e/test_pythons.py (on the oldest supported Python, or this one where
# that is missing), which this file's copy of the same run duplicated.


def _unpack_mine(bundles, dest: Path) -> Path:
    if platform.machine() not in bundles:
        pytest.skip(f"no bundle is built for {platform.machine()}")
    with tarfile.open(bundles[platform.machine()]) as tar:
        tar.extractall(dest, **SAFE)
    (top,) = dest.iterdir()
    return top


def _install(top: Path, root: Path) -> subprocess.CompletedProcess:
    return install(top, root, sys.executable, timeout=600)


def test_installing_a_bundle_again_replaces_the_daemons_code_and_a_damaged_wheel_fails(bundles, tmp_path):
    """A bundle built from a newer checkout keeps the version number: installing it again must
    replace the installed code, not keep it as 'already satisfied'. A damaged dependency wheel
    fails the install (naming pip's error) instead of being taken for a missing RE2 wheel."""
    top = _unpack_mine(bundles, tmp_path / "unpacked")
    root = tmp_path / "root"
    assert _install(top, root).returncode == 0
    (pkg,) = (root / "opt" / "npu-watchdog" / "venv" / "lib").glob("python*/site-packages/watchdog/__init__.py")
    pkg.write_text(pkg.read_text() + "\nSTALE_MARKER = 1\n")
    r = _install(top, root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "STALE_MARKER" not in pkg.read_text()

    broken = tmp_path / "broken"
    top2 = _unpack_mine(bundles, broken)
    (yaml_wheel,) = [w for w in (top2 / "wheels").glob("pyyaml-*.whl")
                     if f"cp{sys.version_info[0]}{sys.version_info[1]}" in w.name]
    yaml_wheel.write_bytes(yaml_wheel.read_bytes()[:4096])
    r = _install(top2, tmp_path / "root2")
    assert r.returncode != 0 and "installing from the bundle failed" in r.stderr, r.stdout + r.stderr

"""`make install` / `make uninstall` into a temporary root: a real venv, real pip, the real script.

One module-scoped install (pip into a fresh venv takes ~10 s) is checked from several angles; the
re-install and uninstall steps run in order in one test because each depends on the previous.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "install.sh"
#: What the module's one install printed.
OUTPUT: dict = {}
PREFIX = "/opt/npu-watchdog"


def run_install(*args: str, env_extra=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run(["sh", str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=str(REPO))


def make(target: str, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", target, f"DESTDIR={root}", f"PYTHON={sys.executable}"],
                          capture_output=True, text=True, timeout=300, cwd=str(REPO))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = tmp_path_factory.mktemp("root")
    r = make("install", root)
    if r.returncode != 0 and ("Could not find a version" in r.stderr or "No matching distribution" in r.stderr):
        pytest.skip(f"no package index reachable for pip: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stdout + r.stderr
    # Our own packaging metadata must not make the build backend complain (license format, ...).
    warned = [line for line in (r.stdout + r.stderr).splitlines()
              if "Warning" in line and ("setuptools" in line or "BuildBackend" in line or "pyproject" in line)]
    assert not warned, "\n".join(warned)
    OUTPUT["install"] = r.stdout + r.stderr
    return root


def test_a_first_install_names_the_placeholder_to_set_and_the_next_step(installed):
    """The shipped example's Feishu URL is a placeholder: the installer says which key, never the
    URL, and what to run once it is set (on a live systemd it enables nothing until then)."""
    out = OUTPUT["install"]
    assert "still holds a placeholder" in out, out
    assert "alerting.channels[0].url (feishu-ops)" in out and "open.feishu.cn" not in out
    assert "systemctl enable --now npu-watchdog" in out


def test_the_fast_log_engine_is_installed_where_a_wheel_exists(installed):
    r = subprocess.run([str(venv_bin(installed) / "python"), "-c",
                        "from watchdog.logrules.matcher import effective_engine; print(effective_engine())"],
                       capture_output=True, text=True, timeout=60, cwd=str(installed))
    assert r.returncode == 0, r.stderr
    import platform

    if platform.machine() in ("x86_64", "aarch64"):  # google-re2 ships manylinux wheels for both
        assert r.stdout.strip() == "re2"


def test_the_demo_runs_from_the_installed_package(installed):
    """The simulated npu-smi ships inside the package: an installed venv has what the demo needs."""
    r = subprocess.run([str(venv_bin(installed) / "python"), "-c",
                        "import watchdog.demo.node as n; print(n.FAKE_NPU_SMI)"],
                       capture_output=True, text=True, timeout=60, cwd=str(installed))
    assert r.returncode == 0, r.stderr
    fake = Path(r.stdout.strip())
    assert str(installed) in str(fake) and fake.is_file()
    r = subprocess.run([str(venv_bin(installed) / "python"), "-c", "import npu_watchdog_heartbeat as h; print(h.__file__)"],
                       capture_output=True, text=True, timeout=60, cwd=str(installed))
    assert r.returncode == 0 and str(installed) in r.stdout, r.stderr
    scenario = installed / "scenario.json"
    scenario.write_text('{"generate": {"npus": 2}}')
    r = subprocess.run([str(venv_bin(installed) / "python"), str(fake), "info"], capture_output=True, text=True,
                       timeout=60, env={"FAKE_NPU_SMI_SCENARIO": str(scenario), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and "910B3" in r.stdout, r.stdout + r.stderr


def venv_bin(root: Path) -> Path:
    return root / PREFIX.lstrip("/") / "venv" / "bin"


def test_venv_runs_the_installed_command(installed):
    exe = venv_bin(installed) / "npu-watchdog"
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # the version and the commit of this checkout (install.sh writes it into the copy it installs)
    from watchdog.release import short_commit

    assert re.fullmatch(r"npu-watchdog \d+\.\d+\.\d+\S* \(commit ([0-9a-f]{12}|unknown)\)", r.stdout.strip()), r.stdout
    assert r.stdout.strip().endswith(f"(commit {short_commit()})"), r.stdout
    # The package comes from the venv's site-packages, not from this checkout.
    r = subprocess.run([str(venv_bin(installed) / "python"), "-c", "import watchdog; print(watchdog.__file__)"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert str(installed) in r.stdout and str(REPO / "watchdog") not in r.stdout, r.stdout


def test_config_example_and_permissions(installed):
    etc = installed / "etc" / "npu-watchdog"
    example = (REPO / "config" / "npu-watchdog.example.yaml").read_text()
    assert (etc / "config.yaml").read_text() == example
    assert (etc / "config.yaml.example").read_text() == example
    assert stat.S_IMODE((etc / "config.yaml").stat().st_mode) == 0o600
    assert stat.S_IMODE(etc.stat().st_mode) & 0o007 == 0
    # The installed daemon accepts the installed config.
    r = subprocess.run([str(venv_bin(installed) / "npu-watchdog"), "check-config", "-c", str(etc / "config.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # Zero-config: the installed config discovers the training jobs (process, logs, heartbeats).
    assert "#   probes.process: fed by discovery" in r.stdout
    assert "#   probes.logs: fed by discovery" in r.stdout


def test_unit_points_at_the_venv(installed):
    unit = installed / "etc" / "systemd" / "system" / "npu-watchdog.service"
    text = unit.read_text()
    exec_start = re.findall(r"(?m)^ExecStart=(.*)$", text)
    exe = venv_bin(installed) / "npu-watchdog"
    assert exec_start == [f"{exe} run -c {installed}/etc/npu-watchdog/config.yaml"]
    assert os.access(exe, os.X_OK)
    # Only ExecStart/Documentation differ from the shipped unit.
    shipped = (REPO / "systemd" / "npu-watchdog.service").read_text().splitlines()
    changed = [a for a, b in zip(shipped, text.splitlines()) if a != b]
    assert all(l.startswith(("ExecStart=", "Documentation=")) for l in changed), changed
    if shutil.which("systemd-analyze"):
        r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_reinstall_keeps_config_then_uninstall_keeps_only_config(installed):
    etc = installed / "etc" / "npu-watchdog"
    cfg = etc / "config.yaml"
    edited = cfg.read_text().replace("name: llama-pretrain", "name: edited-on-this-node")
    assert edited != cfg.read_text()
    cfg.write_text(edited)
    (etc / "config.yaml.example").write_text("stale\n")

    r = run_install("install", "--root", str(installed), "--python", sys.executable)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "keeping the existing" in r.stdout
    assert cfg.read_text() == edited
    assert (etc / "config.yaml.example").read_text() == (REPO / "config" / "npu-watchdog.example.yaml").read_text()
    assert (venv_bin(installed) / "npu-watchdog").exists()

    r = make("uninstall", installed)
    assert r.returncode == 0, r.stdout + r.stderr
    assert cfg.read_text() == edited
    assert not (installed / PREFIX.lstrip("/")).exists()
    assert not (installed / "etc" / "systemd" / "system" / "npu-watchdog.service").exists()
    assert sorted(p.name for p in etc.iterdir()) == ["config.yaml"]
    # Uninstalling again is a no-op, not an error.
    r = make("uninstall", installed)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("args, message", [
    (["install", "--prefix", "opt/relative"], "paths must be absolute"),
    (["uninstall", "--prefix", "/"], "paths must be absolute and not /"),
    (["install", "--frobnicate"], "unknown option: --frobnicate"),
    (["reinstall"], "unknown action: reinstall"),
    (["install", "--source", "/nonexistent/npu-watchdog"], "no npu-watchdog source tree (or unpacked bundle) at /nonexistent/npu-watchdog"),
])
def test_bad_arguments_are_refused(tmp_path, args, message):
    r = run_install(*args, "--root", str(tmp_path))
    assert r.returncode != 0
    assert message in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_missing_python_is_a_clear_error(tmp_path):
    r = run_install("install", "--root", str(tmp_path), "--python", str(tmp_path / "no-python"))
    assert r.returncode == 1
    assert "is missing or is not a working Python" in r.stderr and "npu-watchdog runs on Python 3.7-3.13" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (Debian package `shellcheck`)")
def test_install_script_is_clean_posix_sh():
    r = subprocess.run(["shellcheck", "-s", "sh", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def _fake_bundle(tmp_path: Path, pythons) -> Path:
    """An unpacked bundle as far as install.sh looks before it makes anything: its wheels/ folder
    (empty here) and the PYTHONS it has wheels for."""
    import platform

    top = tmp_path / f"npu-watchdog-0.0.0-linux-{platform.machine()}"
    (top / "wheels").mkdir(parents=True)
    shutil.copy2(SCRIPT, top / "install.sh")
    (top / "PYTHONS").write_text("".join(f"{p}\n" for p in pythons))
    return top


def _pyenv(version: str):
    from tests.pythons_kit import find_python

    exe = find_python(version)
    if exe is None:
        pytest.skip(f"no CPython {version} on this machine (pyenv install {version})")
    return exe


def _refused(top: Path, root: Path, *args: str, env=None) -> str:
    r = subprocess.run(["sh", str(top / "install.sh"), "install", "--root", str(root), "--no-systemctl", *args],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not root.exists() or list(root.iterdir()) == [], "something was made before the refusal"
    (line,) = r.stderr.strip().splitlines()  # the fix in one line
    return line


def test_a_python_the_bundle_has_no_wheels_for_is_refused_before_anything_is_made(tmp_path):
    py313 = _pyenv("3.13")
    top = _fake_bundle(tmp_path, ["3.8", "3.9", "3.10", "3.11", "3.12"])
    line = _refused(top, tmp_path / "root", "--python", py313)
    assert f"{py313} is Python 3.13, which this bundle has no wheels for" in line
    assert "this bundle has wheels for Python 3.8 3.9 3.10 3.11 3.12: install one (" in line
    assert "and pass --python /path/to/it" in line


def test_a_too_old_python_is_refused_before_anything_is_made_naming_the_package(tmp_path):
    py36 = _pyenv("3.6")
    for top in (_fake_bundle(tmp_path, ["3.7", "3.8"]), REPO / "scripts"):
        line = _refused(top, tmp_path / "root", "--python", py36)
        assert f"{py36} is Python 3.6, older than 3.7" in line and "install one (" in line, line
    os_release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    if "debian" in os_release.lower():  # this machine's distribution, named with its package
        assert "apt-get install python3" in line, line


def test_with_no_python_given_the_newest_that_fits_is_taken_or_each_misfit_is_named(tmp_path):
    py36, py313 = _pyenv("3.6"), _pyenv("3.13")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "uname", "basename", "dirname", "grep", "tr", "sed", "awk", "cut", "cat", "mkdir", "ls"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(py36)
    (bin_dir / "python3.13").symlink_to(py313)
    top = _fake_bundle(tmp_path, ["3.8", "3.12"])
    line = _refused(top, tmp_path / "root", env={"PATH": str(bin_dir)})
    assert line.startswith("install.sh: no fitting Python on PATH (")
    assert f"{bin_dir}/python3.13 is Python 3.13, which this bundle has no wheels for" in line
    assert f"{bin_dir}/python3 is Python 3.6, older than 3.7" in line
    assert "this bundle has wheels for Python 3.8 3.12" in line

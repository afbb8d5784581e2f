"""The offline bundle's resolution loop (scripts/bundle.py `_resolve`) with pip stood in for: a
download lands the wheels a real index would give, so the test counts pip runs and reads which
requirements the loop asks for. A second round is needed only when a marker requirement of the
target Python is not met by the first download (pip evaluates markers for the Python running it);
when every one holds it is spared: the bundle build and `check` run pip half as often."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import List

import pytest

from tests.pythons_kit import _bundle_module

bundle = _bundle_module()


def wheel(folder: Path, name: str, version: str, requires: List[str] = ()) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
        zf.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\nVersion: {version}\n{meta}")
    return path


@pytest.fixture
def index(tmp_path):
    """What the stand-in index holds: the daemon (tzlocal < 3 before 3.9, as pyproject says, and a
    marker requirement from 3.10 on that the newest release meets), and two tzlocal releases, of
    which an unpinned download takes the newest."""
    folder = tmp_path / "index"
    folder.mkdir()
    wheel(folder, "npu_watchdog", bundle._version(), ["tzlocal<3,>=2.0; python_version < '3.9'",
                                                      "tzlocal>=2.0; python_version >= '3.10'"])
    wheel(folder, "npu_watchdog_heartbeat", "1.0")
    wheel(folder, "tzlocal", "2.1")
    wheel(folder, "tzlocal", "5.2")
    return folder


@pytest.fixture
def pip_runs(index, monkeypatch):
    """Stands in for pip download: the pinned tzlocal when asked for, else the newest."""
    runs: List[List[str]] = []

    def fake_pip(args, what):
        runs.append(list(args))
        dest = Path(args[args.index("-d") + 1])
        old = any(a.startswith("tzlocal<3") for a in args)
        for w in index.glob("*.whl"):
            if w.name.startswith("tzlocal-") and (w.name.startswith("tzlocal-2") != old):
                continue
            shutil.copy2(w, dest / w.name)
    monkeypatch.setattr(bundle, "_pip", fake_pip)
    return runs


def test_unmet_reads_name_and_version(index):
    found = sorted(index.glob("*.whl"))
    newest = [w for w in found if not w.name.startswith("tzlocal-2")]
    assert bundle._unmet(["tzlocal<3,>=2.0"], newest) == ["tzlocal<3,>=2.0"]
    assert bundle._unmet(["tzlocal<3,>=2.0"], [w for w in found if not w.name.startswith("tzlocal-5")]) == []
    assert bundle._unmet(["backports.zoneinfo"], newest) == ["backports.zoneinfo"]
    # an extra's requirements are not in the wheel's name: always left to a second round
    assert bundle._unmet(["tzlocal[tz]>=2"], newest) == ["tzlocal[tz]>=2"]


@pytest.mark.parametrize("python", ["3.9", "3.11", "3.13"])
def test_a_python_whose_markers_all_hold_is_resolved_in_one_pip_run(tmp_path, pip_runs, python):
    bundle._resolve(tmp_path, "x86_64", python, index=True)
    assert len(pip_runs) == 1
    assert sorted(p.name.split("-")[0] for p in tmp_path.glob("*.whl")) == [
        "npu_watchdog", "npu_watchdog_heartbeat", "tzlocal"]


def test_a_marker_pin_the_first_download_misses_takes_a_second_run_with_the_pin(tmp_path, pip_runs):
    bundle._resolve(tmp_path, "x86_64", "3.8", index=True)
    assert len(pip_runs) == 2
    assert "tzlocal<3,>=2.0" in pip_runs[1] and "tzlocal<3,>=2.0" not in pip_runs[0]
    assert (tmp_path / "tzlocal-2.1-py3-none-any.whl").exists()

#!/usr/bin/env python3
"""Build and check offline install bundles: one tarball per CPU architecture that installs the
daemon on a node with no package index (`install.sh install` from the unpacked bundle runs pip
with `--no-index`).

    python3 scripts/bundle.py build [--arch x86_64 --arch aarch64] [--python 3.8 ...] [--out dist]
    python3 scripts/bundle.py check BUNDLE.tar.gz|DIR [--python 3.8 ...]

A bundle holds the daemon's wheel, the trainer-side heartbeat wheel, a wheel of every runtime
dependency (and of the RE2 engine, the `fast` extra) for each CPython version asked for, the
install script, the systemd unit, the example config, the README, the LICENSE, the CHANGELOG and
`PYTHONS` (the CPython versions it has every wheel for, one a line; install.sh reads it). Why
wheels for every Python: the node's interpreter is whatever its OS ships (3.7 on openEuler 20.03,
EulerOS 2.x and Kylin V10, 3.8 on Ubuntu 20.04, 3.9 on openEuler 22.03, 3.10-3.13 elsewhere), and
a source build needs compilers and headers that training nodes often lack.

The bundle is named `npu-watchdog-<version>-<commit>-linux-<arch>` (the first 12 hex digits of the
commit it was built from; left out when it is built from a tree without its git history), and the
daemon's wheel in it carries the full commit in `watchdog/COMMIT` (`--version` prints it).

Only manylinux2014 (glibc 2.17) and pure-Python wheels are taken, so a bundle installs on the
oldest hosts Atlas servers run (CentOS 7 / EulerOS 2.x era glibc). `build` downloads (it needs
the package index); `check` never does: it asks pip to resolve every requirement for every
(architecture, Python) from the bundle alone, and fails naming what is missing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
ARCHES = ("x86_64", "aarch64")
PYTHONS = ("3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13")
#: The Pythons with a manylinux2014 (glibc 2.17) wheel of google-re2, the `fast` extra: none was
#: ever built for 3.7, and 3.13's need glibc 2.28. Elsewhere the log rules run on the fallback
#: engine (same results, slower), which install.sh, the daemon and `doctor` say.
FAST_PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12")


def requirements(python: str) -> Tuple[str, ...]:
    """What a node with this Python installs from the bundle (install.sh asks for the same)."""
    return ("npu-watchdog[fast]" if python in FAST_PYTHONS else "npu-watchdog", "npu-watchdog-heartbeat")



#: Files beside the wheels: (source in the repository, name in the bundle).
FILES = (("scripts/install.sh", "install.sh"), ("systemd/npu-watchdog.service", "systemd/npu-watchdog.service"),
         ("config/npu-watchdog.example.yaml", "config/npu-watchdog.example.yaml"),
         ("README.md", "README.md"), ("LICENSE", "LICENSE"), ("CHANGELOG.md", "CHANGELOG.md"))


class BundleError(Exception):
    """A bundle could not be built, or is incomplete (the message says which requirement)."""


def _version(init: Path = REPO / "watchdog" / "__init__.py") -> str:
    for line in init.read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise BundleError(f"no __version__ in {init}")


def _pinned(python: str) -> List[str]:
    """requirements() at this checkout's versions: a download must take these two from the wheels
    just built, never a same-named project from the index."""
    heartbeat = _version(REPO / "contrib" / "heartbeat" / "npu_watchdog_heartbeat" / "__init__.py")
    daemon, _ = requirements(python)
    return [f"{daemon}=={_version()}", f"npu-watchdog-heartbeat=={heartbeat}"]


def _commit() -> Optional[str]:
    """The full commit of this checkout (None without git or its history)."""
    try:
        proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "HEAD"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    text = proc.stdout.strip()
    return text if proc.returncode == 0 and len(text) == 40 else None


def bundle_name(arch: str, version: Optional[str] = None, commit: Optional[str] = None) -> str:
    """`npu-watchdog-<version>-<commit>-linux-<arch>` (no commit part when it is not known)."""
    parts = ["npu-watchdog", version or _version()] + ([commit[:12]] if commit else [])
    return "-".join(parts + ["linux", arch])


def _platform_args(arch: str, python: str) -> List[str]:
    abi = "cp" + python.replace(".", "") + ("m" if python == "3.7" else "")  # 3.7 is the last `m` ABI
    return ["--only-binary=:all:", "--platform", f"manylinux2014_{arch}", "--platform", f"manylinux_2_17_{arch}",
            "--python-version", python, "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none"]


#: pip's lines that say what is missing or conflicting (the rest is advice and boilerplate).
_TELLING = ("depends on", "requires", "no matching distribution", "could not find")


def _pip(args: Sequence[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stdout + "\n" + proc.stderr).strip().splitlines()
        telling = [ln.strip() for ln in lines if ln.startswith("    ") or any(t in ln.lower() for t in _TELLING)]
        raise BundleError(f"{what}: pip failed: " + "; ".join(telling or lines[-3:]))


def _own_wheels(wheels: Path, commit: Optional[str]) -> None:
    """The daemon and the heartbeat package as wheels (pure Python), built from this checkout; the
    daemon's with the commit in watchdog/COMMIT."""
    with tempfile.TemporaryDirectory() as stage:
        for src in (REPO, REPO / "contrib" / "heartbeat"):
            copy = Path(stage) / src.name
            shutil.copytree(src, copy, ignore=shutil.ignore_patterns(
                ".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", ".run", "tests", "bench"))
            if commit and (copy / "watchdog").is_dir():
                (copy / "watchdog" / "COMMIT").write_text(commit + "\n", encoding="ascii")
            _pip(["wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(copy)],
                 f"building the wheel of {src.name}")


def _requirement(text: str) -> Any:
    """A parsed requirement (packaging's, else the copy inside pip, which every venv has)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - pip's own copy
        from pip._vendor.packaging.requirements import Requirement  # type: ignore
    return Requirement(text)


def _marker_requirements(found: Sequence[Path], arch: str, python: str) -> List[str]:
    """The requirements of the wheels `found` whose environment marker holds on `python`/`arch`.
    pip download evaluates markers against the Python running it, not the one `--python-version`
    names: `backports.zoneinfo; python_version < "3.9"` would be left out of a 3.8 bundle."""
    env = {"python_version": python, "python_full_version": f"{python}.0", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
           "platform_machine": arch, "os_name": "posix"}
    out = []
    for wheel in found:
        with zipfile.ZipFile(wheel) as zf:
            meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
            text = zf.read(meta).decode("utf-8", "replace") if meta else ""
        extras = [""] + (["fast"] if wheel.name.startswith("npu_watchdog-") and python in FAST_PYTHONS else [])
        for line in text.splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            req = _requirement(line.split(":", 1)[1].strip())
            if req.marker is not None and any(req.marker.evaluate({**env, "extra": e}) for e in extras):
                extra = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
                out.append(f"{req.name}{extra}{req.specifier}")
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _unmet(wanted: Sequence[str], found: Sequence[Path]) -> List[str]:
    """The requirements in `wanted` that no wheel in `found` satisfies, by name and version; one
    with extras always (the extras' own requirements are for pip to resolve in a second round)."""
    versions = {_norm(w.name.split("-")[0]): w.name.split("-")[1] for w in found}
    out = []
    for text in wanted:
        req = _requirement(text)
        version = versions.get(_norm(req.name))
        if req.extras or version is None or not req.specifier.contains(version, prereleases=True):
            out.append(text)
    return out


def _resolve(wheels: Path, arch: str, python: str, index: bool) -> None:
    """Every requirement of `python` on `arch` as wheels in `wheels`: downloaded (index) or only
    checked to be there (no index); markers evaluated for that Python (_marker_requirements)."""
    wanted: List[str] = list(_pinned(python) if index else requirements(python))
    for attempt in range(6):
        with tempfile.TemporaryDirectory() as scratch:
            # (not --quiet: pip then leaves out which package is missing)
            _pip(["download", *([] if index else ["--no-index"]), "--find-links", str(wheels), "-d", scratch,
                  *_platform_args(arch, python), *wanted], f"{arch} / CPython {python}")
            found = sorted(Path(scratch).glob("*.whl"))
            for wheel in found:
                if not (wheels / wheel.name).exists():
                    shutil.copy2(wheel, wheels / wheel.name)
            have = {_norm(w.name.split("-", 1)[0]) for w in found}
            # The daemon's own markers first: they can pin a dependency to a release whose own
            # markers differ (tzlocal < 3 before 3.9), so the others count from the next round on.
            pool = found if attempt else [w for w in found if w.name.startswith("npu_watchdog-")]
            missing = [r for r in _marker_requirements(pool, arch, python)
                       if _norm(re.split(r"[\[<>=!~; ]", r, 1)[0]) not in have or pool is not found]
            # Every marker requirement already holds on what came down (the usual case from 3.10
            # on): a second round would only pin versions that are there, so it is spared.
            settled = not attempt and not _unmet(_marker_requirements(found, arch, python), found)
        if (not missing and attempt) or settled:
            return
        wanted += [r for r in missing if r not in wanted]
    raise BundleError(f"{arch} / CPython {python}: requirements keep growing: {', '.join(wanted)}")


def check(wheels: Path, arches: Sequence[str], pythons: Sequence[str]) -> List[str]:
    """Every requirement resolves from `wheels` alone for each (arch, Python); the problems found."""
    problems = []
    for arch in arches:
        for python in pythons:
            try:
                _resolve(wheels, arch, python, index=False)
            except BundleError as exc:
                problems.append(str(exc))
    return problems


def build(arches: Sequence[str], pythons: Sequence[str], out: Path) -> List[Path]:
    commit, made = _commit(), []
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        own = Path(work) / "own"
        _own_wheels(own, commit)
        for arch in arches:
            name = bundle_name(arch, commit=commit)
            root = Path(work) / name
            wheels = root / "wheels"
            shutil.copytree(own, wheels)
            for python in pythons:
                _resolve(wheels, arch, python, index=True)
            problems = check(wheels, [arch], pythons)
            if problems:
                raise BundleError("\n".join(problems))
            for src, dest in FILES:
                (root / dest).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / src, root / dest)
            (root / "PYTHONS").write_text("".join(f"{p}\n" for p in pythons), encoding="ascii")
            os.chmod(root / "install.sh", 0o755)
            target = out / f"{name}.tar.gz"
            with tarfile.open(target, "w:gz") as tar:
                tar.add(root, arcname=name)
            made.append(target)
    return made


def _unpacked(path: Path, scratch: str) -> Path:
    if path.is_dir():
        return path
    try:
        with tarfile.open(path) as tar:
            tar.extractall(scratch, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    except (OSError, EOFError, tarfile.TarError) as exc:
        raise BundleError(f"{path}: not a readable bundle ({exc})") from None
    tops = list(Path(scratch).iterdir())
    if len(tops) != 1 or not (tops[0] / "wheels").is_dir():
        raise BundleError(f"{path}: not a bundle (one folder with wheels/ expected)")
    return tops[0]


def _arch_of(top: Path) -> List[str]:
    """The architecture a bundle is for, from its wheels (a renamed bundle keeps them)."""
    found = [a for a in ARCHES if any(a in w.name for w in (top / "wheels").glob("*manylinux*.whl"))]
    if len(found) != 1:
        raise BundleError(f"{top}: wheels of {found or 'no'} architecture(s); one expected")
    return found


def _pythons_of(top: Path) -> List[str]:
    """The Pythons a bundle says it has wheels for (its PYTHONS file; every one when it has none)."""
    try:
        listed = [ln.strip() for ln in (top / "PYTHONS").read_text(encoding="ascii").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError):
        return list(PYTHONS)
    unknown = [p for p in listed if p not in PYTHONS]
    if unknown or not listed:
        raise BundleError(f"{top}/PYTHONS: {'unknown Python ' + ', '.join(unknown) if unknown else 'empty'}")
    return listed


def main(argv: Sequence[str] = ()) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download wheels and write one tarball per architecture")
    b.add_argument("--arch", action="append", choices=ARCHES)
    b.add_argument("--python", action="append", choices=PYTHONS)
    b.add_argument("--out", type=Path, default=REPO / "dist")
    c = sub.add_parser("check", help="every requirement present as a wheel, for every architecture and Python")
    c.add_argument("bundle", type=Path)
    c.add_argument("--arch", action="append", choices=ARCHES)
    c.add_argument("--python", action="append", choices=PYTHONS)
    args = p.parse_args(list(argv) or None)
    pythons = args.python or list(PYTHONS)
    try:
        if args.cmd == "build":
            for made in build(args.arch or list(ARCHES), pythons, args.out):
                print(made)
            return 0
        with tempfile.TemporaryDirectory() as scratch:
            top = _unpacked(args.bundle, scratch)
            problems = check(top / "wheels", args.arch or _arch_of(top), args.python or _pythons_of(top))
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"{args.bundle}: {'incomplete' if problems else 'complete'}")
        return 1 if problems else 0
    except BundleError as exc:
        print(f"bundle: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

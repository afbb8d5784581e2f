"""Version facts and their compatibility verdicts (pure: text in, CheckResults out).

Verdicts stronger than a warning come only from `compat.yaml`, where each rule names its public
source; anything the data cannot vouch for is a warning that shows the versions side by side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from watchdog.doctor.model import FAIL, PASS, SKIPPED, WARN, CheckResult

GROUP = "versions"
COMPAT_FILE = Path(__file__).resolve().parent / "compat.yaml"

_BASE = re.compile(r"^(\d+\.\d+\.\d+)")
_CFG_LINE = re.compile(r"^\s*([a-z_]+)_running_version\s*=\s*\[([^\]]*)\]", re.I)


@lru_cache(maxsize=None)
def load_compat(path: str = str(COMPAT_FILE)) -> Dict[str, Any]:
    """The compatibility data; cached, it is shipped with the package and never changes."""
    return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}


def parse_version_info(text: str, key: str = "Version") -> Optional[str]:
    """`Version=24.1.rc1` style files (driver, firmware): the value of `key`, else None."""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip().lower() == key.lower() and value.strip():
            return value.strip()
    return None


def parse_cann_version(text: str) -> Optional[str]:
    """CANN version from `version.cfg` (`runtime_running_version=[7.6.0.1.220:8.0.0]`: the part
    after the colon) or an `ascend_toolkit_install.info` (`version=8.0.RC3`)."""
    preferred: Optional[str] = None
    first: Optional[str] = None
    for line in text.splitlines():
        m = _CFG_LINE.match(line)
        if not m:
            continue
        inner = m.group(2)
        value = inner.rpartition(":")[2].strip() if ":" in inner else inner.strip()
        value = re.sub(r"^CANN[- ]?", "", value, flags=re.I)
        if not value:
            continue
        if m.group(1).lower() in ("toolkit", "runtime") and preferred is None:
            preferred = value
        first = first or value
    if preferred or first:
        return preferred or first
    return parse_version_info(text, "version")


def base_version(version: Optional[str]) -> Optional[str]:
    """`2.1.0.post3` -> `2.1.0`; `2.1.0+cpu` -> `2.1.0`; `2.5.1rc1` -> `2.5.1`."""
    if not version:
        return None
    m = _BASE.match(version.strip())
    return m.group(1) if m else None


def normalize_cann(version: Optional[str]) -> Optional[str]:
    """Compare CANN versions without the community-edition suffix: `8.0.RC3.beta1` -> `8.0.RC3`."""
    if not version:
        return None
    v = re.sub(r"^CANN[- ]?", "", version.strip(), flags=re.I)
    v = re.sub(r"\.(alpha|beta)\d*$", "", v, flags=re.I)
    return v.upper()


@dataclass
class VersionFacts:
    """What `gather` found; `None` means unknown, with the reason in `errors[name]`."""

    npu_smi: Optional[str] = None
    driver: Optional[str] = None
    firmware: Optional[str] = None
    cann: Optional[str] = None
    python: Optional[str] = None
    torch: Optional[str] = None
    torch_npu: Optional[str] = None
    #: Where each version came from (file path, command).
    sources: Dict[str, str] = field(default_factory=dict)
    errors: Dict[str, str] = field(default_factory=dict)
    #: Whether a training interpreter was given and answered.
    interpreter: Optional[str] = None

    def as_dict(self) -> Dict[str, Optional[str]]:
        return {k: getattr(self, k) for k in ("npu_smi", "driver", "firmware", "cann", "python",
                                              "torch", "torch_npu")}


def _cite(compat: Dict[str, Any], source_id: str) -> str:
    src = (compat.get("sources") or {}).get(source_id) or {}
    return f"{source_id}: {src.get('url', '?')}"


def _side_by_side(facts: VersionFacts, *names: str) -> str:
    return ", ".join(f"{n} {getattr(facts, n) or '?'}" for n in names)


def check_versions(facts: VersionFacts, compat: Optional[Dict[str, Any]] = None) -> List[CheckResult]:
    """One result per version fact, then one per known-compatibility rule."""
    compat = compat if compat is not None else load_compat()
    out: List[CheckResult] = []

    def fact(name: str, label: str, missing_status: str, advice: str) -> None:
        value = getattr(facts, name)
        where = facts.sources.get(name, "")
        if value:
            out.append(CheckResult(GROUP, name, PASS, f"{label} {value}" + (f" ({where})" if where else ""),
                                   details={"version": value, "source": where}))
        else:
            out.append(CheckResult(GROUP, name, missing_status,
                                   f"{label} version unknown: {facts.errors.get(name, 'not found')}", advice,
                                   details={"source": where}))

    # npu-smi failing is a device-level failure reported by the devices group; here it is unknown.
    fact("npu_smi", "npu-smi", SKIPPED, "npu-smi must be on PATH (or probes.npu.npu_smi) and work")
    fact("driver", "driver", WARN, "set doctor.driver_version_file to the driver's version.info")
    if facts.driver and facts.npu_smi and base_version(facts.driver) != base_version(facts.npu_smi) \
            and facts.driver.lower() != facts.npu_smi.lower():
        out.append(CheckResult(GROUP, "driver_npu_smi", WARN,
                               f"driver package and npu-smi disagree: {_side_by_side(facts, 'driver', 'npu_smi')}",
                               "the driver was upgraded without a reboot, or npu-smi comes from another install",
                               details=facts.as_dict()))
    fact("firmware", "firmware", SKIPPED,
         "set doctor.firmware_version_file; npu-smi info -t board -i <id> shows it too")
    fact("cann", "CANN toolkit", WARN,
         "torch_npu needs CANN: install the toolkit and `source .../ascend-toolkit/set_env.sh`; "
         "or point doctor.cann_version_files at its version.cfg")

    if not facts.interpreter:
        out.append(CheckResult(GROUP, "training_python", SKIPPED,
                               facts.errors.get("python", "no training interpreter given"),
                               "pass --python PATH (the job's python) to check Python, torch and torch_npu"))
        return out
    if not facts.python:
        out.append(CheckResult(GROUP, "training_python", FAIL,
                               f"cannot ask {facts.interpreter}: {facts.errors.get('python', 'no answer')}",
                               "check the --python path; the job would not start with it either"))
        return out
    out.append(CheckResult(GROUP, "training_python", PASS,
                           f"{facts.interpreter}: {_side_by_side(facts, 'python', 'torch', 'torch_npu')}",
                           details=facts.as_dict()))
    for name, advice in (("torch", "pip install the torch version your torch_npu is built for"),
                         ("torch_npu", "pip install torch-npu matching torch and the CANN toolkit")):
        if not getattr(facts, name):
            out.append(CheckResult(GROUP, name, WARN, f"{name} not installed in {facts.interpreter}: "
                                   f"{facts.errors.get(name, 'not found')}", advice))

    # Rule: torch_npu X.Y.Z(.postN) needs torch X.Y.Z.
    rule = compat.get("torch_npu_requires_same_torch") or {}
    if facts.torch and facts.torch_npu:
        want, have = base_version(facts.torch_npu), base_version(facts.torch)
        if want and have and want != have:
            out.append(CheckResult(
                GROUP, "torch_torch_npu", rule.get("status", FAIL),
                f"torch_npu {facts.torch_npu} is built for torch {want}, found torch {facts.torch}",
                f"install torch=={want} (or the torch_npu release for torch {have}); source {_cite(compat, rule.get('source', ''))}",
                details={"torch": facts.torch, "torch_npu": facts.torch_npu, "source": rule.get("source")}))
        else:
            out.append(CheckResult(GROUP, "torch_torch_npu", PASS,
                                   f"torch {facts.torch} matches torch_npu {facts.torch_npu}"))

    # Table: which CANN each torch_npu release was made for.
    table = compat.get("torch_npu_cann") or {}
    releases = {str(k): str(v) for k, v in (table.get("releases") or {}).items()}
    if facts.torch_npu:
        listed = releases.get(facts.torch_npu.split("+")[0])
        cites = "; ".join(_cite(compat, s) for s in table.get("sources", []))
        if not facts.cann:
            out.append(CheckResult(GROUP, "torch_npu_cann", WARN,
                                   f"torch_npu {facts.torch_npu} with CANN unknown",
                                   f"torch_npu {facts.torch_npu} is listed for CANN {listed}" if listed
                                   else "find the CANN version torch_npu was built for in the compatibility table"))
        elif listed is None:
            out.append(CheckResult(GROUP, "torch_npu_cann", WARN,
                                   f"combination not in the compatibility table: {_side_by_side(facts, 'torch_npu', 'cann')}",
                                   f"check the Ascend/pytorch version table ({cites})",
                                   details={"torch_npu": facts.torch_npu, "cann": facts.cann}))
        elif normalize_cann(listed) != normalize_cann(facts.cann):
            out.append(CheckResult(GROUP, "torch_npu_cann", WARN,
                                   f"torch_npu {facts.torch_npu} is released for CANN {listed}, found CANN {facts.cann}",
                                   f"install the torch_npu release for CANN {facts.cann} or CANN {listed} ({cites})",
                                   details={"torch_npu": facts.torch_npu, "cann": facts.cann, "listed": listed}))
        else:
            out.append(CheckResult(GROUP, "torch_npu_cann", PASS,
                                   f"torch_npu {facts.torch_npu} is released for CANN {listed}"))

    pyt = compat.get("torch_python") or {}
    supported = (pyt.get("versions") or {}).get(base_version(facts.torch) or "")
    if facts.torch and supported:
        minor = ".".join(facts.python.split(".")[:2])
        if minor in [str(s) for s in supported]:
            out.append(CheckResult(GROUP, "python_torch", PASS, f"Python {minor} is supported by torch {facts.torch}"))
        else:
            out.append(CheckResult(GROUP, "python_torch", WARN,
                                   f"Python {minor} is not listed for torch {base_version(facts.torch)} "
                                   f"(listed: {', '.join(map(str, supported))})",
                                   f"source {_cite(compat, pyt.get('source', ''))}"))
    return out

"""Config of the preflight `doctor` command: where version files live, thresholds, env rules.

Every path is configurable so the same checks run against a real node or a test root.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

from watchdog.compat import Literal  # 3.7: from typing_extensions

import yaml
from pydantic import Field, field_validator

from watchdog.config.types import Duration, StrictModel

_RULES_FILE = Path(__file__).resolve().parent.parent.parent / "doctor" / "env_rules.yaml"


class EnvRule(StrictModel):
    """A variable whose whole value matches `pattern` (case-insensitive) gets `status`."""

    #: Name of the job environment variable the rule judges.
    var: str
    #: Regular expression the whole value must match (case-insensitive) for the rule to apply.
    pattern: str
    #: The check's result when the value matches: `warn` or `fail`.
    status: Literal["warn", "fail"] = "warn"
    #: One line; `{var}` and `{value}` are replaced.
    reason: str
    #: What to do about it, shown under the result.
    advice: str = ""

    @field_validator("var")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("expected an environment variable name")
        return v

    @field_validator("pattern")
    @classmethod
    def _regex(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"invalid regular expression ({exc})") from None
        return v


def default_env_rules() -> List[EnvRule]:
    """The shipped rules (`watchdog/doctor/env_rules.yaml`): data, not code."""
    data = yaml.safe_load(_RULES_FILE.read_text(encoding="utf-8")) or []
    return [EnvRule.model_validate(r) for r in data]


class DoctorConfig(StrictModel):
    """Paths and thresholds of the preflight checks."""

    #: Driver version file (`Version=...`).
    driver_version_file: str = "/usr/local/Ascend/driver/version.info"
    #: Firmware version file (`Version=...`); npu-smi's board info is used when it is absent.
    firmware_version_file: str = "/usr/local/Ascend/firmware/version.info"
    #: CANN toolkit version files, first readable one wins; `*` globs allowed.
    cann_version_files: List[str] = Field(default_factory=lambda: [
        "/usr/local/Ascend/ascend-toolkit/latest/version.cfg",
        "/usr/local/Ascend/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info",
    ])
    #: Devices (chips, as torch_npu counts them) this node must show; `--expect N` overrides.
    expected_devices: Optional[int] = Field(default=None, ge=1, le=1024)
    #: A device whose free HBM share is below this (0-1) before the run is a warning.
    min_free_hbm_ratio: float = Field(default=0.85, ge=0.0, le=1.0)
    #: The training interpreter asked for Python/torch/torch_npu versions; `--python` overrides.
    python: Optional[str] = None
    #: Hard timeout of the version query in the training interpreter.
    python_timeout: Duration = Field(default="60s")
    #: Hard timeout of the whole `--smoke` run (all devices).
    smoke_timeout: Duration = Field(default="300s")
    #: Smoke test: minimum cosine similarity of NPU vs CPU results.
    smoke_min_cosine: float = Field(default=0.999, gt=0.0, le=1.0)
    #: Smoke test: maximum absolute error of NPU vs CPU results.
    smoke_max_abs_err: float = Field(default=1e-3, gt=0.0)
    #: HCCL_EXEC_TIMEOUT below this is a warning: slow-but-healthy collectives (a checkpoint on
    #: rank 0 while the others wait) would be killed.
    hccl_exec_timeout_min: Duration = Field(default="600s")
    #: Simple pattern rules on the job's environment (default: the shipped list).
    env_rules: List[EnvRule] = Field(default_factory=default_env_rules)

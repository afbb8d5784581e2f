"""User-defined command checks: run a program on an interval, its exit status is the verdict.

Like node-problem-detector's custom plugins: ops already have scripts (`hccn_tool` link checks,
a filesystem probe); the daemon runs them with a hard timeout and raises a finding when one fails.
"""

from __future__ import annotations

import re
from typing import List

from watchdog.compat import Literal  # 3.7: from typing_extensions

from pydantic import Field, field_validator

from watchdog.config.types import Duration, StrictModel

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class CommandCheck(StrictModel):
    """One external check."""

    #: Short identifier, used as the probe name (`command:<name>`) and in the finding's labels.
    name: str
    #: Program and arguments; never run through a shell.
    argv: List[str] = Field(min_length=1)
    #: Time between two runs of the command.
    interval: Duration = Field(default="60s")
    #: A run taking longer is killed and counts as a failure.
    timeout: Duration = Field(default="10s")
    #: Severity of the finding raised while the command exits non-zero.
    severity: Literal["info", "warning", "critical"] = "warning"
    #: What to check first when this command fails (shown in the alert).
    hint: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("expected lower-case letters, digits and _ (max 40), starting with a letter")
        return v

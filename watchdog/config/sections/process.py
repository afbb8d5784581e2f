"""Config of the process probe: how to find the training ranks and when their state is a finding."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field, field_validator, model_validator

from watchdog.config.sections.common import ProbeSchedule
from watchdog.config.types import Duration


def _check_regex(v: Optional[str]) -> Optional[str]:
    if v is None:
        return v
    try:
        re.compile(v)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression ({exc})") from None
    return v


class ProcessProbeConfig(ProbeSchedule):
    """Disabled until configured: a probe with nothing to watch reports nothing.

    Selectors combine with AND: a process is a rank when it matches every selector given. At
    least one of `pid_file`, `cmdline`, `name` or `parent` must be set when enabled.
    """

    #: Watch the rank processes found by `cmdline`/`launcher` (discovery feeds it when on).
    enabled: bool = False
    interval: Duration = Field(default="10s")
    #: File (or glob of files) holding rank pids, one per line.
    pid_file: Optional[str] = None
    #: Regular expression searched in the command line (arguments joined by spaces).
    cmdline: Optional[str] = None
    #: Exact process name (as in `ps -o comm`, e.g. python3).
    name: Optional[str] = None
    #: Owner of the rank processes; defaults to `job.user`.
    user: Optional[str] = None
    #: Regular expression for the launcher (name or command line, e.g. `torchrun`): only its
    #: direct children are ranks. Defaults to `job.launcher`.
    parent: Optional[str] = None
    #: Number of ranks on this node; fewer alive is `rank_missing`. Unset: ranks seen once are expected.
    expected: Optional[int] = Field(default=None, ge=1, le=65_536)
    #: `process_not_started` when no rank has appeared this long after the daemon started.
    start_grace: Duration = Field(default="15m")
    #: `rank_disk_sleep` when a rank stays in uninterruptible sleep (D, usually a driver call) this long.
    disk_sleep_after: Duration = Field(default="5m")
    #: `rank_stopped` when a rank stays stopped (T: SIGSTOP, a debugger) this long.
    stopped_after: Duration = Field(default="1m")
    #: `rank_zombie` when a rank stays a zombie (exited, not reaped by its launcher) this long.
    zombie_after: Duration = Field(default="30s")

    _regex = field_validator("cmdline", "parent")(_check_regex)

    @model_validator(mode="after")
    def _has_selector(self) -> "ProcessProbeConfig":
        if self.enabled and not (self.pid_file or self.cmdline or self.name or self.parent):
            raise ValueError("enabled without a selector: set at least one of pid_file, cmdline, name, parent")
        return self

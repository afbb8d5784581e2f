"""The installed systemd unit against the config: a private /tmp hides heartbeat and log files
that trainers write under /tmp.

Why: with `PrivateTmp=yes` the daemon sees an empty /tmp of its own, so a heartbeat glob such as
`/tmp/hb/rank*.json` matches nothing. The daemon says so at run time (`path_unmatched`); doctor
says it before the job starts. Pure: the unit text and the config come in, a verdict goes out.
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from watchdog.doctor.model import PASS, SKIPPED, WARN, CheckResult

#: Where `make install` (scripts/install.sh) and packages put the unit, most specific first.
UNIT_PATHS = ("/etc/systemd/system/npu-watchdog.service", "/usr/lib/systemd/system/npu-watchdog.service",
              "/lib/systemd/system/npu-watchdog.service")
TMP_DIRS = ("/tmp/", "/var/tmp/")
_TRUE = {"1", "yes", "true", "on", "disconnected"}


def private_tmp(unit_text: str) -> bool:
    """The last `PrivateTmp=` of the [Service] section (systemd: the last assignment wins)."""
    value = None
    section = ""
    for raw in unit_text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == "[Service]" and re.match(r"PrivateTmp\s*=", line):
            value = line.split("=", 1)[1].strip().lower()
    return value in _TRUE


def watched_tmp_paths(heartbeat_paths: Sequence[str], log_paths: Sequence[str]) -> List[str]:
    return [p for p in list(heartbeat_paths) + list(log_paths) if p.startswith(TMP_DIRS) or p in ("/tmp", "/var/tmp")]


def check_private_tmp(unit: Optional[Tuple[str, str]], heartbeat_paths: Sequence[str],
                      log_paths: Sequence[str]) -> CheckResult:
    """`unit` is (path, text) of the installed unit, or None when none is installed."""
    under_tmp = watched_tmp_paths(heartbeat_paths, log_paths)
    if unit is None:
        return CheckResult("daemon", "private_tmp", SKIPPED, "no installed npu-watchdog.service found",
                           details={"paths_under_tmp": under_tmp})
    path, text = unit
    if not private_tmp(text):
        return CheckResult("daemon", "private_tmp", PASS, f"{path} shares /tmp with the training job",
                           details={"unit": path})
    if not under_tmp:
        return CheckResult("daemon", "private_tmp", PASS,
                           f"{path} has PrivateTmp=yes and no heartbeat or log path is under /tmp",
                           details={"unit": path})
    shown = ", ".join(under_tmp[:3]) + (f" (+{len(under_tmp) - 3} more)" if len(under_tmp) > 3 else "")
    return CheckResult(
        "daemon", "private_tmp", WARN,
        f"{path} has PrivateTmp=yes, so the daemon cannot see {shown}",
        "write heartbeats and logs outside /tmp (e.g. the job's output folder), or add a drop-in "
        "`systemctl edit npu-watchdog` with `[Service]` / `PrivateTmp=no`",
        details={"unit": path, "paths_under_tmp": under_tmp})

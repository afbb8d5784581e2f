"""Restarts of a worker group, as the launcher's agent says them: one restart per line.

Why a parser of its own: a restart is an event to count (per job and cause), not a failure line
to hold; the agent's failure line (`launcher_exit_report`) says a worker failed, this says how
many times the agent has started the group again. Known wording: torch elastic's agent
`[default] Worker group FAILED. 2/3 attempts left; will restart worker group` (also `UNHEALTHY`);
the restart number is `max - left + 1`. Pure, linear-time (no nested repetition).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_TORCH_ELASTIC = re.compile(r"Worker group (FAILED|UNHEALTHY)\. (\d{1,6})/(\d{1,6}) attempts left; will restart worker group")


@dataclass(frozen=True)
class RestartLine:
    """One restart the agent announced: its number (1 for the first) out of the allowed `limit`."""

    launcher: str
    number: int
    limit: int
    state: str


def parse_restart(line: str) -> Optional[RestartLine]:
    """The restart a line announces, or None. Lines are cut to 8 KiB first (bounded work)."""
    m = _TORCH_ELASTIC.search(line[:8192])
    if m is None:
        return None
    left, limit = int(m.group(2)), int(m.group(3))
    return RestartLine("torchrun", max(1, limit - left + 1), limit, m.group(1))

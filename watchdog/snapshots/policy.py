"""Which findings get a snapshot, and how often (pure decisions plus a small rate-limit memory)."""

from __future__ import annotations

import threading
from typing import Dict, Tuple

from watchdog.core.findings import JOB_LABEL, SEVERITY_RANK, Finding


def wants_snapshot(finding: Finding, scfg: object) -> bool:
    """The finding's own flag wins, then the per-rule setting, then the severity threshold."""
    if finding.snapshot is not None:
        return bool(finding.snapshot)
    rule = scfg.rules.get(finding.rule)  # type: ignore[attr-defined]
    if rule is not None and rule.enabled is not None:
        return bool(rule.enabled)
    return SEVERITY_RANK[finding.severity] >= SEVERITY_RANK[scfg.min_severity]  # type: ignore[attr-defined]


def min_interval(finding: Finding, scfg: object) -> float:
    rule = scfg.rules.get(finding.rule)  # type: ignore[attr-defined]
    if rule is not None and rule.min_interval is not None:
        return float(rule.min_interval)
    return float(scfg.min_interval)  # type: ignore[attr-defined]


class Cooldown:
    """At most one snapshot per (rule, job) per interval: a flapping stall runs py-spy once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: Dict[Tuple[str, str], float] = {}

    def allow(self, finding: Finding, interval: float, now: float, commit: bool = True) -> bool:
        """Whether a snapshot may be taken now; `commit` records it as taken (a skip for another
        reason, e.g. low disk, must not use up the slot)."""
        key = (finding.rule, finding.labels.get(JOB_LABEL, ""))
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < interval:
                return False
            if commit:
                self._last[key] = now
            return True

"""Check results and the report they form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

PASS = "pass"
WARN = "warn"
FAIL = "fail"
SKIPPED = "skipped"
STATUSES = (PASS, WARN, FAIL, SKIPPED)

#: Exit codes of `doctor`: all pass (or skipped), any warn, any fail.
EXIT_PASS = 0
EXIT_WARN = 1
EXIT_FAIL = 2


@dataclass
class CheckResult:
    """One line of the doctor's report: a verdict with a one-line reason and what to do."""

    group: str
    name: str
    status: str
    reason: str
    advice: str = ""
    #: Machine-readable facts behind the verdict (versions, codes, pids...), kept in --json/records.
    details: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown check status {self.status!r}")

    @property
    def id(self) -> str:
        return f"{self.group}.{self.name}"

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["id"] = self.id
        return d


@dataclass
class Report:
    """Everything `doctor` found: check results plus the facts worth recording."""

    checks: List[CheckResult] = field(default_factory=list)
    versions: Dict[str, Optional[str]] = field(default_factory=dict)
    cards: List[Dict[str, Any]] = field(default_factory=list)
    environment: Dict[str, str] = field(default_factory=dict)
    environment_source: str = ""
    host: str = ""
    timestamp: float = 0.0

    def add(self, results: "List[CheckResult] | CheckResult") -> None:
        if isinstance(results, CheckResult):
            self.checks.append(results)
        else:
            self.checks.extend(results)

    def counts(self) -> Dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for c in self.checks:
            out[c.status] += 1
        return out

    def exit_code(self, warn_exit: int = EXIT_WARN) -> int:
        """2 on any fail, `warn_exit` (default 1) on any warn, else 0. Skipped checks do not count."""
        counts = self.counts()
        if counts[FAIL]:
            return EXIT_FAIL
        if counts[WARN]:
            return warn_exit
        return EXIT_PASS

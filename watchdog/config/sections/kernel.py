"""Config of the kernel probe: follow /dev/kmsg and judge its records with the kernel rules."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from pydantic import Field, model_validator

from watchdog.config.sections.common import ProbeSchedule
from watchdog.config.sections.logs import LogRuleConfig
from watchdog.config.types import Duration
from watchdog.logrules.kernel import RuleError, kernel_ruleset


class KernelRuleConfig(LogRuleConfig):
    """A user kernel rule: the log rule fields plus `pid`."""

    #: Regular expression whose one group is the process the record names (its rank's finding),
    #: or whose named groups `pid` and `comm` are its pid and command name (both must be the rank's).
    pid: Optional[str] = None

    def as_rule_data(self) -> Dict[str, Any]:
        data = super().as_rule_data()
        if self.pid is not None:
            data["pid"] = self.pid
        return data


class KernelProbeConfig(ProbeSchedule):
    """Off unless enabled (on in the shipped example config). Reading /dev/kmsg needs root or
    CAP_SYSLOG where `kernel.dmesg_restrict` is 1; when it cannot be read the probe is down
    (`probe_down`), like any probe that cannot observe."""

    #: Follow the kernel log (on in the shipped example config).
    enabled: bool = False
    #: Safety round; new records are read within a fraction of a second of their write (the
    #: probe waits on /dev/kmsg for them), so this only bounds how late a missed wake-up is seen.
    interval: Duration = Field(default="10s")
    #: The kernel's log device (a test may point it elsewhere; it must be /dev/kmsg-shaped).
    device: str = "/dev/kmsg"
    #: A kernel finding stays in force this long after its record, then resolves. Records older
    #: than this when first read (the boot's earlier messages at the first start) are counted but
    #: raise nothing.
    hold: Duration = Field(default="30m")
    #: Records judged per round at most (a backlog, e.g. the boot's messages, takes several rounds).
    max_records_per_round: int = Field(default=20000, ge=100, le=1_000_000)
    #: Shipped kernel rule ids to switch off (the table in docs/detection.md, Kernel log).
    disable: List[str] = Field(default_factory=list)
    #: Your own kernel rules, in the log rule format (category `custom` unless given).
    rules: List[KernelRuleConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> "KernelProbeConfig":
        try:
            kernel_ruleset(self.disable, [r.as_rule_data() for r in self.rules])
        except RuleError as exc:
            raise ValueError(str(exc)) from None
        return self


"""Config of the logs probe: sources to follow, which rules apply, and how long findings hold."""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Optional

from watchdog.compat import Literal  # 3.7: from typing_extensions

from pydantic import Field, field_validator, model_validator

from watchdog.config.sections.common import ProbeSchedule
from watchdog.config.types import Duration, Size, StrictModel
from watchdog.logrules.matcher import re2_loadable

log = logging.getLogger("watchdog.config")
from watchdog.logrules.model import CATEGORIES, SHIPPED_PACKS, RuleError, build_ruleset, current_rule_id

# Derived from the rule model's declarations: a new pack is one YAML file and one name there.
Category = Literal[CATEGORIES]  # type: ignore[valid-type]
PackName = Literal[SHIPPED_PACKS]  # type: ignore[valid-type]

#: Default rank pattern for training logs: `rank3.log`, `rank_3`, `train-rank-03.out`, `rank03/`.
DEFAULT_RANK_PATTERN = r"rank[_-]?(\d+)"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class LogSource(StrictModel):
    """One configured log source: a name (metric label) and paths or globs."""

    #: Name of the source: the `source` label of its metrics and findings.
    name: str
    #: Files or globs of this source (rotation-safe; new files matching later are picked up).
    paths: List[str] = Field(min_length=1)
    #: `training` (stdout/stderr of the ranks; rank taken from the file name) or `plog` (CANN
    #: plog files, named by pid: no rank).
    kind: Literal["training", "plog"] = "training"
    #: Regex with one group matching the rank in the file's path; default by kind.
    rank_pattern: Optional[str] = None
    #: Where files that already exist when the daemon starts (and are not in its saved offsets)
    #: are read from. Files appearing later are read from their beginning, except a file followed
    #: before (it left the glob and came back): it is read on from where reading stopped.
    start: Literal["end", "beginning"] = "end"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("expected letters, digits and . _ - (max 64)")
        return v

    @field_validator("rank_pattern")
    @classmethod
    def _rank_pattern(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        try:
            rx = re.compile(v)
        except re.error as exc:
            raise ValueError(f"does not compile: {exc}") from None
        if rx.groups < 1:
            raise ValueError("needs one group capturing the rank, e.g. rank[_-]?(\\d+)")
        return v

    @property
    def effective_rank_pattern(self) -> Optional[str]:
        if self.rank_pattern:
            return self.rank_pattern
        return DEFAULT_RANK_PATTERN if self.kind == "training" else None


class LogThresholdConfig(StrictModel):
    #: Matching lines needed within `window`.
    count: int = Field(ge=1, le=1_000_000)
    #: How far back matching lines count.
    window: Duration = Field(default="10m")


class LogRuleConfig(StrictModel):
    """A user rule: same fields as the shipped ones (see watchdog/logrules/packs/*.yaml)."""

    #: Unique id of the rule (the `log_rule` label).
    id: str
    #: Category: the alert rule is `log_<category>` (nan, oom, hccl, device, crash, traceback,
    #: custom).
    category: Category = "custom"
    #: Severity of the finding a match raises.
    severity: Literal["info", "warning", "critical"] = "warning"
    #: Regular expressions (RE2 syntax: linear time, no backreferences or lookaround); any one
    #: matching a line is a match.
    patterns: List[str] = Field(min_length=1)
    #: Lower-case substrings one of which every matching line contains (speeds up the
    #: pure-Python engine; leave empty if unsure).
    literals: List[str] = Field(default_factory=list)
    #: `root` (a cause) or `cascade` (a symptom folded into a root seen shortly before).
    role: Literal["root", "cascade"] = "root"
    #: Short words for the finding's summary (default: the rule id).
    title: str = ""
    #: What to check first, shown in the alert.
    hint: str = ""
    #: Alert only when the rule matches `count` lines within `window` (default: every match).
    threshold: Optional[LogThresholdConfig] = None

    def as_rule_data(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "id": self.id, "category": self.category, "severity": self.severity,
            "patterns": list(self.patterns), "role": self.role, "title": self.title, "hint": self.hint,
        }
        if self.literals:
            data["literals"] = list(self.literals)
        if self.threshold is not None:
            data["threshold"] = {"count": self.threshold.count, "window": self.threshold.window}
        return data


class LogsProbeConfig(ProbeSchedule):
    """Disabled until configured: a probe with nothing to watch reports nothing."""

    #: Follow the training logs and plogs and match them against the log rules.
    enabled: bool = False
    #: Polling interval, used where file change events are not available (or `follow: poll`).
    #: A failure line should page within seconds (plus the group window): reading new lines is
    #: cheap (a stat per file when nothing was written), so the default round is short.
    interval: Duration = Field(default="3s")
    #: How new lines are noticed: `events` (Linux inotify: a line is read within a fraction of a
    #: second of its write, within 2 s while the logs are written all the time, an idle log costs
    #: nothing; polling where events are unavailable) or `poll` (every `interval`, e.g. for files
    #: written by other hosts on a network filesystem).
    follow: Literal["events", "poll"] = "events"
    #: With events: a full round (globs expanded, every file looked at) at least this often, in
    #: case an event was missed.
    rescan: Duration = Field(default="30s")
    sources: List[LogSource] = Field(default_factory=list)
    #: Shipped rule packs applied to every source.
    packs: List[PackName] = Field(default_factory=lambda: list(SHIPPED_PACKS))
    #: Shipped rule ids to switch off.
    disable: List[str] = Field(default_factory=list)

    @field_validator("disable")
    @classmethod
    def _current_ids(cls, v: List[str]) -> List[str]:
        return [current_rule_id(rid, "probes.logs.disable", log.warning) for rid in v]
    #: Your own rules (category `custom` unless given).
    rules: List[LogRuleConfig] = Field(default_factory=list)
    #: A log finding stays in force this long after its last matching line, then resolves.
    hold: Duration = Field(default="30m")
    #: An HCCL timeout / traceback / heartbeat-lost line this soon after an OOM, a device fault or
    #: a native crash is folded into that root finding as its symptom.
    cascade_window: Duration = Field(default="10m")
    #: Log lines that count as training progress for the stall rule (regexes, case-insensitive):
    #: unset = the shipped iteration/step patterns of Megatron/MindSpeed, HF Trainer, DeepSpeed and
    #: MindSpore; `[]` = no log line counts. A line any failure rule matches never counts.
    progress_patterns: Optional[List[str]] = None
    #: Categories whose findings absorb cascades.
    cascade_roots: List[Category] = Field(default_factory=lambda: ["oom", "device", "crash"])
    #: A first match this soon after the ranks started counts as "early" (OOM/NaN hints differ).
    early_window: Duration = Field(default="30m")
    #: Bytes read per round at most (a backlog is caught up over several rounds).
    max_bytes_per_round: Size = Field(default="64MiB")
    #: Bytes read at once (lines are never split across slices, except over-long ones).
    slice_size: Size = Field(default="8MiB")
    #: Lines are truncated to this for matching and display.
    max_line_bytes: Size = Field(default="64KiB")
    #: Matching engine: auto (RE2 where google-re2 is installed, loaded once a log is busy: 64 KiB within a minute), re2, re.
    engine: Literal["auto", "re2", "re"] = "auto"

    @model_validator(mode="after")
    def _check(self) -> "LogsProbeConfig":
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"sources: duplicate names {dupes}")
        if self.slice_size < 4096:
            raise ValueError("slice_size must be at least 4KiB")
        if self.max_line_bytes < 256:
            raise ValueError("max_line_bytes must be at least 256B")
        # Both are buffers held in memory at once: a typo like `8GiB` must not be a daemon's RSS.
        if self.slice_size > 1 << 30:
            raise ValueError("slice_size must be at most 1GiB")
        if self.max_line_bytes > 16 << 20:
            raise ValueError("max_line_bytes must be at most 16MiB")
        try:
            build_ruleset(self.packs, self.disable, [r.as_rule_data() for r in self.rules])
        except RuleError as exc:
            raise ValueError(str(exc)) from None
        for i, pat in enumerate(self.progress_patterns or ()):
            try:
                re.compile(pat)
            except re.error as exc:
                raise ValueError(f"progress_patterns[{i}]: bad regular expression {pat!r}: {exc}") from None
        if self.engine == "re2":
            if not re2_loadable():
                raise ValueError("engine: re2 needs the google-re2 package (pip install google-re2)")
        return self

    def ruleset(self) -> tuple:
        return build_ruleset(self.packs, self.disable, [r.as_rule_data() for r in self.rules])

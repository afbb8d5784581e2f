"""The `logs` probe: follows the configured log files and applies the log rules each round.

Besides this round's events, the observation carries the *active* matches (per rule and rank:
first/last match time, count, a few evidence lines) for as long as a finding may stay in force
(`hold`) or absorb a cascade (`cascade_window`). The detector stays pure and does not depend on
how much probe history the state store keeps.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Deque, Dict, List, Optional, Tuple

from watchdog.config.sections.logs import LogsProbeConfig
from watchdog.logrules.extract import Extractor, RawEvent
from watchdog.logrules.matcher import Matcher
from watchdog.logrules.tail import Followed, SourceSpec, SourceStats, Tailer
from watchdog.observations import LogEvent, LogObservation
from watchdog.probes.base import Collected, Probe, ProbeContext

log = logging.getLogger(__name__)

OFFSETS_FILE = "log-offsets.json"
EVIDENCE_LINES = 5


@dataclass(frozen=True)
class ActiveMatch:
    """Recent matches of one rule in one rank's (or one source's) logs."""

    rule: str
    category: str
    severity: str
    role: str
    title: str
    rank: Optional[str]
    source: str
    path: str
    first_at: float
    last_at: float
    count: int
    summary: str
    evidence: Tuple[str, ...]
    hint: str = ""
    hint_early: str = ""
    hint_late: str = ""
    #: Device (chip logic id) the matching lines name, if any; one record per device.
    device: Optional[int] = None
    #: The discovered job whose rank wrote the line (None for configured sources).
    job: Optional[str] = None


@dataclass(frozen=True)
class LogProbeObservation(LogObservation):
    """LogObservation plus what the detector and the metrics need."""

    active: Tuple[ActiveMatch, ...] = ()
    #: Per configured source, a copy of the tailer's counters at the end of this round.
    sources: Dict[str, SourceStats] = field(default_factory=dict)
    #: Raw matching lines per rule id since the daemon started.
    matches_total: Dict[str, int] = field(default_factory=dict)
    errors: Tuple[str, ...] = ()
    #: Per configured source, the paths (files or directories) that cannot be read now.
    unreadable: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    #: Why the read offsets cannot be saved (None when the last save worked) and how often it failed.
    state_error: Optional[str] = None
    state_save_errors_total: int = 0


def source_specs(cfg: LogsProbeConfig) -> List[SourceSpec]:
    return [SourceSpec(name=s.name, paths=tuple(s.paths), rank_pattern=s.effective_rank_pattern, start=s.start)
            for s in cfg.sources]


class LogsProbe(Probe):
    name = "logs"

    def __init__(self, cfg: LogsProbeConfig, state_dir: str):
        self.cfg = cfg
        self.interval = cfg.interval
        self.timeout = cfg.timeout
        self.state_dir = state_dir
        self._build_rules(cfg)
        self.tailer = Tailer(source_specs(cfg), os.path.join(state_dir, OFFSETS_FILE),
                             slice_bytes=cfg.slice_size, round_bytes=cfg.max_bytes_per_round)
        self.active: Dict[Tuple[str, str, str], Dict[str, Any]] = {}

    def _build_rules(self, cfg: LogsProbeConfig) -> None:
        old = getattr(self, "extractor", None)
        self.rules = cfg.ruleset()
        self.matcher = Matcher(self.rules, engine=cfg.engine, max_line_bytes=cfg.max_line_bytes)
        self.extractor = Extractor(self.matcher)
        if old is not None:  # counters survive a reload
            for rid, n in old.matched.items():
                if rid in self.extractor.matched:
                    self.extractor.matched[rid] = n

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, LogsProbe):
            return False
        self.cfg = new.cfg
        self.interval = new.interval
        self.timeout = new.timeout
        self._build_rules(new.cfg)
        self.tailer.set_sources(source_specs(new.cfg))
        self.tailer.slice_bytes = new.tailer.slice_bytes
        self.tailer.round_bytes = new.tailer.round_bytes
        new.close()
        return True

    def close(self) -> None:
        self.tailer.close()

    # -- the round ------------------------------------------------------------------------------
    def collect(self) -> Collected:
        now = time.time()
        events: List[LogEvent] = []

        def consume(f: Followed, block: bytes) -> None:
            for raw in self.extractor.feed(f.stream, block, now):
                events.append(self._event(f, raw, now))

        self._refresh_sources(now)
        self.tailer.poll(consume, now)
        horizon = max(self.cfg.hold, self.cfg.cascade_window)
        for key in [k for k, a in self.active.items() if now - a["last_at"] > horizon]:
            del self.active[key]
        stats = self.tailer.stats
        t = self.tailer
        errors = tuple(sorted(t.errors.values()))
        followed = sum(s.files_followed for s in stats.values())
        # Neither an unreadable path nor offsets that cannot be saved stop the round (that would
        # drop what the readable files said): the observation carries both conditions, which
        # become the log_unreadable and log_offsets_unsaved findings and metrics.
        unreadable: Dict[str, List[str]] = {}
        for path, msg in sorted(t.errors.items()):
            unreadable.setdefault(t.error_sources.get(path, ""), []).append(msg)
        obs = LogProbeObservation(
            events=tuple(events),
            last_line_at={n: s.last_line_at for n, s in stats.items() if s.last_line_at is not None},
            lines_read={n: s.lines_round for n, s in stats.items()},
            active=tuple(self._active_records()),
            sources={n: replace(s) for n, s in stats.items()},
            matches_total=dict(self.extractor.matched),
            errors=errors,
            unreadable={k: tuple(v) for k, v in unreadable.items()},
            state_error=t.state_error,
            state_save_errors_total=t.state_save_errors_total,
        )
        lines = sum(s.lines_round for s in stats.values())
        summary = f"{followed} files, {lines} lines, {len(events)} events, {len(self.active)} active"
        if t.state_error:
            summary += "; offsets NOT saved"
        return Collected(obs, summary)

    def _refresh_sources(self, now: float) -> None:
        """Configured sources never change between reloads; discovered ones do (see below)."""

    def _event(self, f: Followed, raw: RawEvent, now: float) -> LogEvent:
        r = raw.rule
        key = (r.id, f.job or "", f.rank if f.rank is not None else "", "" if raw.device is None else str(raw.device))
        a = self.active.get(key)
        if a is None:
            a = {"rule": r, "rank": f.rank, "job": f.job, "source": f.source, "path": f.path, "first_at": now,
                 "count": 0, "evidence": deque(maxlen=EVIDENCE_LINES), "device": raw.device}
            self.active[key] = a
        a["last_at"] = now
        a["count"] += 1
        a["path"] = f.path
        a["summary"] = raw.text
        ev: Deque[str] = a["evidence"]
        for line in raw.lines[-EVIDENCE_LINES:]:
            ev.append(line)
        return LogEvent(source=f.source, path=f.path, line_no=raw.line_no, rule=r.id, category=r.category,
                        severity=r.severity, role=r.role, text=raw.text, time=now, lines=raw.lines,
                        device=raw.device)

    def _active_records(self) -> List[ActiveMatch]:
        out = []
        for a in self.active.values():
            r = a["rule"]
            out.append(ActiveMatch(
                rule=r.id, category=r.category, severity=r.severity, role=r.role, title=r.title, rank=a["rank"],
                source=a["source"], path=a["path"], first_at=a["first_at"], last_at=a["last_at"], count=a["count"],
                summary=a["summary"], evidence=tuple(a["evidence"]), hint=r.hint, hint_early=r.hint_early,
                hint_late=r.hint_late, device=a["device"], job=a.get("job")))
        return out


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 40


def build(ctx: ProbeContext) -> List[Probe]:
    cfg = ctx.config.probes.logs
    if not cfg.enabled:
        return []
    if ctx.config.fed_by_discovery("logs"):
        from watchdog.probes.discovered_logs import DiscoveredLogsProbe

        return [DiscoveredLogsProbe(cfg, ctx.state_dir, ctx.config.discovery, ctx.discovery_feed())]
    if not cfg.sources:
        return []
    return [LogsProbe(cfg, ctx.state_dir)]

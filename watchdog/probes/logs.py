"""The `logs` probe: follows the configured log files and applies the log rules each round.

Besides this round's events, the observation carries the *active* matches (per rule and rank:
first/last match time, count, a few evidence lines) for as long as a finding may stay in force
(`hold`) or absorb a cascade (`cascade_window`). The detector stays pure and does not depend on
how much probe history the state store keeps.

Scheduled through watchdog.probes.discovered_logs, which builds this probe or, where discovery
feeds the logs, its subclass (that module imports this one, so the choice is made there).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Deque, Dict, Iterable, List, Optional, Set, Tuple

from watchdog.host import clock
from watchdog.config.sections.logs import LogsProbeConfig
from watchdog.logrules import follow
from watchdog.logrules.extract import Extractor, RawEvent
from watchdog.logrules.inotify import EVERYTHING, DirWatch
from watchdog.logrules.lastlines import LastLines, LastLinesRing
from watchdog.logrules.matcher import Matcher
from watchdog.logrules.progress import ProgressMatcher
from watchdog.logrules.tail import Followed, SourceSpec, SourceStats, Tailer
from watchdog.observations import JobState, LogEvent, LogObservation, PaceLine
from watchdog.parse.restarts import parse_restart
from watchdog.privacy.redact import Redactor
from watchdog.core.state import RecordKey
from watchdog.probes.base import Collected, Probe

log = logging.getLogger(__name__)

OFFSETS_FILE = "log-offsets.json"
#: Offsets are saved at least this often during rounds that read only changed files.
SAVE_EVERY = 3.0
EVIDENCE_LINES = 5
#: Root-cause matches are kept this long at most (see `_horizon`).
ROOT_RETENTION = 24 * 3600.0


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
    #: The first matching line of this run of matches (`summary` is the newest): where a NaN
    #: began is where to roll back to, so titles and hints name this one.
    first_summary: str = ""
    #: A generic vocabulary rule's match (`fallback`): evidence for a cause, never a page alone
    #: (see watchdog.detectors.logs).
    generic: bool = False


#: Launcher rules that report a failure or a restart rather than cause one: never a restart's cause.
_LAUNCHER_RULES = frozenset({"launcher_exit_report", "launcher_failure_report", "launcher_killed"})


@dataclass(frozen=True)
class JobRestarts:
    """The restarts of one job's worker group on one cause (the rule whose line came before them)."""

    job: Optional[str]
    #: The rule id of the cause's line, or "unknown" when no failure line came before the restart.
    cause: str
    cause_title: str
    count: int
    first_at: float
    last_at: float
    #: The agent's newest restart line and the newest line of the cause.
    line: str
    cause_line: str = ""
    #: How many restarts the agent allows (its `max_restarts`), as its line says.
    limit: int = 0


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
    #: (source, job, message) of the unreadable paths discovery found for a job: the finding names the job.
    unreadable_jobs: Tuple[Tuple[str, str, str], ...] = ()
    #: Why the read offsets cannot be saved (None when the last save worked) and how often it failed.
    state_error: Optional[str] = None
    state_save_errors_total: int = 0
    #: Per followed file, its last lines (a vanished rank's last words; watchdog.detectors.cause).
    last_lines: Tuple[LastLines, ...] = ()
    #: Worker-group restarts per job and cause, kept for ROOT_RETENTION after the last one.
    restarts: Tuple[JobRestarts, ...] = ()

    def for_job(self, job: JobState, first: bool) -> "LogProbeObservation":
        """The job's matches (configured sources belong to the first job) and its own progress:
        a second job's lines are not its progress."""
        own = self.job_progress_at.get(job.name, {}) if self.job_progress_at else self.progress_at
        mine = lambda j: j == job.name or (j is None and first)  # noqa: E731
        return replace(self, active=tuple(a for a in self.active if mine(a.job)), progress_at=own,
                       pace=tuple(p for p in self.pace if mine(p.job)),
                       restarts=tuple(r for r in self.restarts if mine(r.job)))


#: The logs probe's records (the discovery-fed logs probe's too: it is this probe, fed).
LOGS: RecordKey[LogProbeObservation] = RecordKey("logs")


def source_specs(cfg: LogsProbeConfig) -> List[SourceSpec]:
    return [SourceSpec(name=s.name, paths=tuple(s.paths), rank_pattern=s.effective_rank_pattern, start=s.start)
            for s in cfg.sources]


class LogsProbe(Probe):
    name = "logs"

    def __init__(self, cfg: LogsProbeConfig, state_dir: str, secrets: Iterable[str] = ()):
        self.cfg = cfg
        #: Matched lines go into pages, status and the saved state: the config's own secrets (a
        #: channel's URL in a client's traceback, `requests` printing the webhook it failed to
        #: reach) and secret-looking assignments on them are redacted first.
        self.redactor = Redactor(secrets)
        self._redact_kept = False
        self.interval = cfg.interval
        self.timeout = cfg.timeout
        self.state_dir = state_dir
        self._build_rules(cfg)
        self.tailer = Tailer(source_specs(cfg), os.path.join(state_dir, OFFSETS_FILE),
                             slice_bytes=cfg.slice_size, round_bytes=cfg.max_bytes_per_round)
        self.active: Dict[Tuple[str, str, str], Dict[str, Any]] = {}
        #: Per source: newest progress line time (the stall rule's log progress), persisted.
        self.progress_at: Dict[str, float] = {}
        #: The same per discovered job (the discovered logs probe forgets a job with its files).
        self.job_progress_at: Dict[str, Dict[str, float]] = {}
        self.tailer.extra_state = self._active_state
        self._restored = False
        self.watch: Optional[DirWatch] = DirWatch.open() if cfg.follow == "events" else None
        self._set_interval(cfg)
        #: Paths whose change events arrived since the last round (EVERYTHING: look at all).
        self._pending: Set[str] = set()
        self._pending_lock = threading.Lock()
        self._last_full = 0.0
        self._last_save = 0.0
        self.last_lines = LastLinesRing()
        #: Restarts per (job, cause) and this round's restart lines waiting for their cause.
        self.restarts: Dict[Tuple[str, str], JobRestarts] = {}
        self._restart_lines: List[Tuple[Optional[str], Any, str]] = []
        #: The last round's blind spots (offsets not saved, unreadable paths): see `collect`.
        self._health: Tuple[Optional[str], Dict[str, Tuple[str, ...]]] = (None, {})

    def _set_interval(self, cfg: LogsProbeConfig) -> None:
        # With change events the scheduled round is only the safety rescan; events start the others.
        self.interval = cfg.interval if self.watch is None else max(cfg.interval, cfg.rescan)

    # -- change events (called by the scheduler's follower thread) ------------------------------
    def wait_change(self, timeout: float) -> bool:
        """True when a round should start now: a backlog is left, or a followed file (or a file a
        pattern matches) changed. Blocks up to `timeout`; without events it only reports backlogs."""
        if follow.behind(self.tailer):
            return True
        if self.watch is None:
            time.sleep(timeout)
            return False
        changed = self.watch.wait(timeout)
        if not changed:
            return False
        relevant = {p for p in changed if p == EVERYTHING or follow.concerns(self.tailer, p)}
        if not relevant:
            return False
        with self._pending_lock:
            self._pending |= relevant
        return True

    def _take_pending(self) -> Set[str]:
        with self._pending_lock:
            pending, self._pending = self._pending, set()
        return pending

    def _build_rules(self, cfg: LogsProbeConfig) -> None:
        old = getattr(self, "extractor", None)
        self.rules = cfg.ruleset()
        self.matcher = Matcher(self.rules, engine=cfg.engine, max_line_bytes=cfg.max_line_bytes)
        self.extractor = Extractor(self.matcher)
        self.progress = ProgressMatcher(cfg.progress_patterns)
        if old is not None:  # counters survive a reload
            for rid, n in old.matched.items():
                if rid in self.extractor.matched:
                    self.extractor.matched[rid] = n

    def reconfigure(self, new: Probe) -> bool:
        # The same kind only: discovery turned on or off by a reload swaps the probe (a plain one
        # that took a discovered one's settings over would follow no file at all).
        if type(new) is not type(self):
            return False
        self.cfg = new.cfg
        self.timeout = new.timeout
        self.redactor = new.redactor
        # A secret the reload added is taken out of the lines kept too, at the next round (this
        # runs on the reloading thread while a round may be changing the matches).
        self._redact_kept = True
        if (self.watch is None) != (new.watch is None):
            self.watch, new.watch = new.watch, self.watch
        self._set_interval(new.cfg)
        self._build_rules(new.cfg)
        self.tailer.set_sources(source_specs(new.cfg))
        self.tailer.slice_bytes = new.tailer.slice_bytes
        self.tailer.round_bytes = new.tailer.round_bytes
        new.discard()
        return True

    def _redact_active(self) -> None:
        """The kept matches' lines (summaries, evidence) through the current redactor: they were
        redacted with the secrets of their time (an older config, before a reload or restart)."""
        red = self.redactor.text
        for a in self.active.values():
            a["summary"] = red(a.get("summary", ""))
            a["first_summary"] = red(a.get("first_summary", ""))
            a["evidence"] = deque((red(x) for x in a["evidence"]), maxlen=EVIDENCE_LINES)

    def close(self) -> None:
        self.tailer.close()
        if self.watch is not None:
            self.watch.close()

    # -- the round ------------------------------------------------------------------------------
    def collect(self) -> Collected:
        now = clock.now()
        if self._redact_kept:
            self._redact_kept = False
            self._redact_active()
        events: List[LogEvent] = []
        pace: List[PaceLine] = []

        def consume(f: Followed, data: bytes, stop: int) -> None:
            for raw in self.extractor.feed(f.stream, data, now, stop):
                events.append(self._event(f, raw, now))
            self.last_lines.feed(f.path, f.source, f.job, f.rank, data, min(stop, len(data)), now)
            block = data if stop >= len(data) else data[:stop]  # progress lines: complete ones only
            found, marks = self.progress.marks(block, lambda text: bool(self.matcher.match_text(text)))
            pace.extend(PaceLine(now, f.source, m, f.job, f.path) for m in marks)
            if found:
                self.progress_at[f.source] = now
                if f.job is not None:
                    self.job_progress_at.setdefault(f.job, {})[f.source] = now

        self._refresh_sources(now)
        due = self._read(consume, now)
        self._count_restarts(now)
        if due:  # after the count: the restarts are saved with the offsets past their lines
            self.tailer.save_round()
        for key in [k for k, a in self.active.items() if now - a["last_at"] > self._horizon(a["rule"])]:
            del self.active[key]
        stats = self.tailer.stats
        t = self.tailer
        errors = tuple(sorted(t.errors.values()))
        followed = sum(s.files_followed for s in stats.values())
        # Neither an unreadable path nor offsets that cannot be saved stop the round (that would
        # drop what the readable files said): the observation carries both conditions, which
        # become the log_unreadable and log_offsets_unsaved findings and metrics.
        unreadable: Dict[str, List[str]] = {}
        # (discovered files' jobs: looked up only in a round with an unreadable path)
        jobs = {p: j for s in t.sources for p, j, _rank in s.path_labels if j} if t.errors else {}
        unreadable_jobs = []
        for path, msg in sorted(t.errors.items()):
            source = t.error_sources.get(path, "")
            unreadable.setdefault(source, []).append(msg)
            if path in jobs:
                unreadable_jobs.append((source, jobs[path], msg))
        obs = LogProbeObservation(
            events=tuple(events),
            last_line_at={n: s.last_line_at for n, s in stats.items() if s.last_line_at is not None},
            lines_read={n: s.lines_round for n, s in stats.items()},
            progress_at=dict(self.progress_at),
            job_progress_at={j: dict(v) for j, v in self.job_progress_at.items()},
            pace=tuple(pace),
            active=tuple(self._active_records()),
            sources={n: replace(s) for n, s in stats.items()},
            matches_total=dict(self.extractor.matched),
            errors=errors,
            unreadable={k: tuple(v) for k, v in unreadable.items()},
            unreadable_jobs=tuple(unreadable_jobs),
            state_error=t.state_error,
            state_save_errors_total=t.state_save_errors_total,
            last_lines=self.last_lines.snapshot(),
            restarts=tuple(self.restarts.values()),
        )
        lines = sum(s.lines_round for s in stats.values())
        summary = f"{followed} files, {lines} lines, {len(events)} events, {len(self.active)} active"
        if t.state_error:
            summary += "; offsets NOT saved"
        # Without new matches no detector answer changes now (holds and progress are judged by
        # the periodic passes), so an event round spares the daemon a detector pass; unless the
        # probe's own blind spots changed (offsets saved again, a path readable again): judged
        # now, or an alert still pending on the old answer would fire after its cause was gone.
        health = (t.state_error, obs.unreadable)
        changed, self._health = health != self._health, health
        return Collected(obs, summary, quiet=not events and not changed, more=follow.behind(t))

    def _restore_once(self, now: float) -> None:
        """At the first round, not when built (see `Tailer.load_saved`): the saved offsets and,
        saved with them, the active matches and progress times."""
        if not self._restored:
            self._restored = True
            self.tailer.load_saved()
            self._restore_active(self.tailer.saved_extra.get("active"), now)
            self._restore_progress(self.tailer.saved_extra.get("progress_at"))
            self._restore_restarts(self.tailer.saved_extra.get("restarts"), now)

    def _read(self, consume: Any, now: float) -> bool:
        """A full round (globs expanded, every file looked at, rotation handled), or after change
        events of files already followed and still the same files, only those files. True when
        the offsets are due to be saved (every full round; a partial one every SAVE_EVERY)."""
        self._restore_once(now)
        pending = self._take_pending()
        partial = (self.watch is not None and pending and EVERYTHING not in pending
                   and now - self._last_full < self.interval * 0.9
                   and follow.unchanged_files(self.tailer, pending) and not follow.behind(self.tailer))
        due = True
        if partial:
            follow.poll_paths(self.tailer, consume, now, pending)
            due = now - self._last_save >= SAVE_EVERY
            if due:
                self._last_save = now
        else:
            if self.watch is not None:
                # Watch before reading: a line written between this read and a watch added only
                # after it would raise no event and wait for the next write or the rescan.
                self.watch.sync(follow.watch_dirs(self.tailer))
            self.tailer.poll(consume, now, save=False)
            self._last_full = self._last_save = now
        if self.watch is not None:
            self.watch.sync(follow.watch_dirs(self.tailer))
        return due

    def _refresh_sources(self, now: float) -> None:
        """Configured sources never change between reloads; discovered ones do (see below)."""

    def _event(self, f: Followed, raw: RawEvent, now: float) -> LogEvent:
        r = raw.rule
        key = _match_key(r.id, f.job, f.rank, raw.device)
        # The matched line goes into pages, status and the saved state (see `redactor`).
        text = self.redactor.text(raw.text)
        lines = tuple(self.redactor.text(line) for line in raw.lines)
        a = self.active.get(key)
        if a is None:
            a = {"rule": r, "rank": f.rank, "job": f.job, "source": f.source, "path": f.path, "first_at": now,
                 "count": 0, "evidence": deque(maxlen=EVIDENCE_LINES), "device": raw.device,
                 "first_summary": text}
            self.active[key] = a
        a["last_at"] = now
        a["count"] += 1
        a["path"] = f.path
        a["summary"] = text
        ev: Deque[str] = a["evidence"]
        for line in lines[-EVIDENCE_LINES:]:
            ev.append(line)
        if r.id == "launcher_exit_report":
            restart = parse_restart(raw.text)
            if restart is not None:
                self._restart_lines.append((f.job, restart, text))  # the job_restarting evidence
        return LogEvent(source=f.source, path=f.path, line_no=raw.line_no, rule=r.id, category=r.category,
                        severity=r.severity, role=r.role, text=text, time=now, lines=lines,
                        device=raw.device)

    def _count_restarts(self, now: float) -> None:
        """Count this round's restart lines per job and cause. Judged after the whole round is
        read: the failing rank's line and the agent's restart line are in different files, read
        in either order. The cause is the job's failure line newest since its previous restart
        (a root cause first, a bare traceback last), else `unknown`; counts are forgotten
        ROOT_RETENTION after the last."""
        # The previous restart per job as of before this round (several restarts read in one round
        # share the lines read with them).
        before = {job: max((r.last_at for r in self.restarts.values() if r.job == job), default=now - self.cfg.hold)
                  for job, _, _ in self._restart_lines}
        for job, restart, text in self._restart_lines:
            seen = [a for a in self.active.values() if a.get("job") == job and a["rule"].id not in _LAUNCHER_RULES
                    and a["last_at"] > before[job]]
            best = max(seen, key=lambda a: (not a["rule"].fallback, a["rule"].role == "root",
                                            a["rule"].category != "traceback", a["last_at"]), default=None)
            cause = best["rule"].id if best is not None else "unknown"
            old = self.restarts.get((job or "", cause))
            self.restarts[(job or "", cause)] = JobRestarts(
                job=job, cause=cause, cause_title=best["rule"].title if best is not None else "",
                count=(old.count if old else 0) + 1, first_at=old.first_at if old else now, last_at=now,
                line=text[:600], cause_line=(best.get("summary") or "")[:600] if best is not None else "",
                limit=restart.limit)
        self._restart_lines.clear()
        for key in [k for k, r in self.restarts.items() if now - r.last_at > ROOT_RETENTION]:
            del self.restarts[key]

    def _horizon(self, rule: Any) -> float:
        """How long a match is kept after its last line: a root cause much longer than its `hold`,
        since the detector keeps it in force while the job it broke stays broken."""
        base = max(self.cfg.hold, self.cfg.cascade_window)
        return max(base, ROOT_RETENTION) if rule.role == "root" else base

    # -- active matches across restarts ---------------------------------------------------------
    def _active_state(self) -> Dict[str, Any]:
        """The active matches as JSON, saved atomically with the offsets they belong to."""
        rows = []
        for a in self.active.values():
            rows.append({"rule": a["rule"].id, "rank": a["rank"], "source": a["source"], "path": a["path"],
                         "first_at": a["first_at"], "last_at": a["last_at"], "count": a["count"],
                         "summary": a.get("summary", ""), "evidence": list(a["evidence"]),
                         "device": a.get("device"), "first_summary": a.get("first_summary", ""),
                         "job": a.get("job")})
        return {"active": rows, "progress_at": dict(self.progress_at),
                "restarts": [asdict(r) for r in self.restarts.values()]}

    def _restore_restarts(self, rows: Any, now: float) -> None:
        """The worker-group restarts counted before a daemon restart: the count per job and cause
        goes on (a third restart on one cause pages as the third), and the next restart's cause is
        read since the previous one, not since the daemon started. Expired or malformed rows are
        dropped."""
        if not isinstance(rows, list):
            return
        for row in rows:
            try:
                r = JobRestarts(**{k: row[k] for k in _RESTART_FIELDS if k in row})
                times = (r.first_at, r.last_at)
                ok = (isinstance(r.cause, str) and type(r.count) is int and r.count > 0 and type(r.limit) is int
                      and all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
                              for t in times)
                      and r.first_at <= r.last_at <= now + 60  # none from the future: it would never expire
                      and (r.job is None or isinstance(r.job, str)))
                if ok and now - float(r.last_at) <= ROOT_RETENTION:
                    self.restarts[(r.job or "", r.cause)] = replace(
                        r, line=str(r.line)[:600], cause_line=str(r.cause_line)[:600], cause_title=str(r.cause_title))
            except (KeyError, TypeError, ValueError):
                log.warning("dropped an unreadable saved restart count: %.200r", row)

    def _restore_progress(self, saved: Any) -> None:
        """The last progress line per source from before a restart: its line lies before the saved
        offset, and without it a hung job would look like it had just made progress."""
        if isinstance(saved, dict):
            for src, at in saved.items():
                if isinstance(src, str) and isinstance(at, (int, float)):
                    self.progress_at[src] = float(at)

    def _restore_active(self, rows: Any, now: float) -> None:
        """Take back the matches saved before a restart (their lines lie before the saved offsets
        and are never read again): a log alert then holds for its full `hold`, not until the
        engine's resolve delay. Rows of rules that no longer exist, expired or malformed are dropped."""
        if not isinstance(rows, list):
            return
        by_id = {r.id: r for r in self.rules}
        for row in rows:
            try:
                rule = by_id.get(row["rule"])
                last_at = float(row["last_at"])
                if rule is None or now - last_at > self._horizon(rule):
                    continue
                rank = row.get("rank")
                rank = None if rank is None else str(rank)
                device = row.get("device")
                device = int(device) if isinstance(device, int) else None
                job = row.get("job") if isinstance(row.get("job"), str) else None
                # The same key as a new line of this match gets, so the match goes on after the
                # restart (first line, count) instead of a second one starting beside it.
                key = _match_key(rule.id, job, rank, device)
                self.active[key] = {
                    "rule": rule, "rank": rank, "job": job, "source": str(row["source"]),
                    "path": str(row["path"]), "first_at": float(row["first_at"]), "last_at": last_at,
                    "count": int(row["count"]), "summary": str(row.get("summary", "")), "device": device,
                    "first_summary": str(row.get("first_summary", "")),
                    "evidence": deque((str(x) for x in row.get("evidence", [])), maxlen=EVIDENCE_LINES)}
            except (KeyError, TypeError, ValueError):
                log.warning("dropped an unreadable saved log match: %.200r", row)
        if self.active:
            self._redact_active()
            log.info("restored %d active log match(es) from the saved offsets", len(self.active))

    def _active_records(self) -> List[ActiveMatch]:
        out = []
        for a in self.active.values():
            r = a["rule"]
            out.append(ActiveMatch(
                rule=r.id, category=r.category, severity=r.severity, role=r.role, title=r.title, rank=a["rank"],
                source=a["source"], path=a["path"], first_at=a["first_at"], last_at=a["last_at"], count=a["count"],
                summary=a["summary"], evidence=tuple(a["evidence"]), hint=r.hint, hint_early=r.hint_early,
                hint_late=r.hint_late, device=a["device"], job=a.get("job"),
                first_summary=a.get("first_summary") or a["summary"], generic=r.fallback))
        return out


_RESTART_FIELDS = tuple(f.name for f in fields(JobRestarts))


def _match_key(rule: str, job: Any, rank: Any, device: Any) -> tuple:
    """One active match per (rule, job, rank, device), as strings: a restored match (read back
    from JSON) and a new line of it must land on the same key."""
    return (rule, job or "", "" if rank is None else str(rank), "" if device is None else str(device))


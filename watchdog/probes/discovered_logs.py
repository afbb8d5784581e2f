"""The logs probe fed by discovery: the ranks' stdout/stderr files, the log files they hold open
for writing, and their CANN plog files (matched to a rank by the pid in `plog-<pid>_*.log`).

Discovered files stay followed for `discovery.forget_after` after their job is gone from the
process table, so the last lines of an ended job are read to the end and a file that a later run
appends to is not read again from its beginning.
"""

from __future__ import annotations

import os
import re
from typing import Dict, Iterable, List, Optional, Tuple

from watchdog.config.sections.common import ProbeSection
from watchdog.config.sections.discovery import DiscoveryConfig
from watchdog.config.sections.logs import LogsProbeConfig
from watchdog.discovery.feed import DiscoveryFeed
from watchdog.discovery.model import Discovered
from watchdog.logrules.inotify import EVERYTHING
from watchdog.logrules.tail import SourceSpec
from watchdog.privacy.redact import config_secrets
from watchdog.probes.base import Probe, ProbeContext, ProbeError
from watchdog.probes.logs import LogsProbe

TRAIN, PLOG = "train", "plog"
_PLOG_NAME = re.compile(r"^plog-([0-9]{1,9})_[^/]*\.log$", re.ASCII)
#: Plog files listed per folder at most (a folder of a long-lived user can be large).
MAX_PLOG_FILES = 2048

Labels = Tuple[str, Optional[str], Optional[str]]  # source, job, rank


def plan_files(found: Discovered, listdir=os.listdir) -> Dict[str, Labels]:
    """path -> (source, job, rank) for every file discovery attributes to a rank.

    A file several ranks write (a shared stdout) has no rank; a file named like a CANN plog
    (`plog-<pid>_*.log`) is a plog wherever it lives.
    """
    out: Dict[str, Labels] = {}
    for job in found.jobs:
        by_pid = {r.pid: str(r.rank) for r in job.ranks}
        writers: Dict[str, set] = {}
        for r in job.ranks:
            for path in r.logs:
                writers.setdefault(path, set()).add(str(r.rank))
        for path, ranks in writers.items():
            source = PLOG if _PLOG_NAME.match(os.path.basename(path)) else TRAIN
            out.setdefault(path, (source, job.name, next(iter(ranks)) if len(ranks) == 1 else None))
        for d in job.plog_dirs:
            try:
                names = sorted(listdir(d))[-MAX_PLOG_FILES:]
            except OSError:
                continue  # not created yet: CANN makes it at the first plog line
            for n in names:
                m = _PLOG_NAME.match(n)
                if m and int(m.group(1)) in by_pid:
                    out.setdefault(os.path.join(d, n), (PLOG, job.name, by_pid[int(m.group(1))]))
    return out


def _rank_uids(found: Discovered) -> Dict[Tuple[str, Optional[str]], int]:
    """(job, rank or None) -> the user whose files they must be (None: the job's first rank's)."""
    out: Dict[Tuple[str, Optional[str]], int] = {}
    for job in found.jobs:
        for r in job.ranks:
            if r.uid is not None:
                out[(job.name, str(r.rank))] = r.uid
                out.setdefault((job.name, None), r.uid)
    return out


class DiscoveredLogsProbe(LogsProbe):
    def __init__(self, cfg: LogsProbeConfig, state_dir: str, dcfg: DiscoveryConfig, feed: DiscoveryFeed,
                 secrets: Iterable[str] = ()):
        cfg = cfg.model_copy(update={"sources": []})
        super().__init__(cfg, state_dir, secrets)
        self.dcfg, self.feed = dcfg, feed
        self._files: Dict[str, Tuple[Labels, float]] = {}
        #: path -> the user of the rank writing it (the file must be that user's).
        self._uids: Dict[str, int] = {}
        #: path -> when its job started (a file last written before that holds nothing of it).
        self._since: Dict[str, float] = {}
        #: The feed's `logs_version` as of the last round this probe was woken for.
        self._logs_version = feed.logs_version
        #: The files written while the daemon was down were taken up (the first refresh).
        self._resumed = False

    def wait_change(self, timeout: float) -> bool:
        """As the logs probe's, and at once when discovery found a rank's log file or plog folder
        it had not seen: a new job's files are followed within seconds of the process scan that
        found them, not at the next rescan (`probes.logs.rescan`)."""
        version = self.feed.logs_version
        if version != self._logs_version:
            self._logs_version = version
            with self._pending_lock:
                self._pending.add(EVERYTHING)
            return True
        return super().wait_change(timeout)

    def _run_starts(self, paths: Iterable[str]) -> Tuple[Tuple[str, int], ...]:
        """(path, offset) for files not followed yet whose job's lines begin after an earlier
        run's (`DiscoveryFeed.run_start`). Asked for new files only."""
        out = []
        for p in paths:
            since = self._since.get(p)
            if since is None or p in self.tailer.files:
                continue
            at = self.feed.run_start(p, since)
            if at:
                out.append((p, at))
        return tuple(out)

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, DiscoveredLogsProbe):
            return False
        self.cfg, self.interval, self.timeout, self.dcfg = new.cfg, new.interval, new.timeout, new.dcfg
        self.redactor = new.redactor
        self._build_rules(new.cfg)
        self.tailer.slice_bytes, self.tailer.round_bytes = new.tailer.slice_bytes, new.tailer.round_bytes
        new.discard()
        return True

    def _refresh_sources(self, now: float) -> None:
        try:
            found = self.feed.current(max_age=self.dcfg.interval)
        except Exception as exc:
            raise ProbeError(f"discovery failed: {type(exc).__name__}: {exc}") from None
        hccl = max((j.hccl.exec_timeout_s or 0 for j in found.jobs), default=0)
        if hccl + 120 > self.cfg.cascade_window:  # keep roots active as long as detectors/jobs.py folds
            self.cfg = self.cfg.model_copy(update={"cascade_window": float(hccl + 120)})
        uids = _rank_uids(found)
        started = {j.name: j.started_at for j in found.jobs if j.started_at}
        if not self._resumed:
            # Files of the ranks the daemon followed before its restart that grew meanwhile are
            # read from their saved offsets once, whoever writes them now (their job may have
            # restarted into new files, or ended): what was written while it was down is scanned.
            self._resumed = True
            for path, labels in self.tailer.written_while_down().items():
                self._files[path] = (labels, now)
        for path, labels in plan_files(found).items():
            self._files[path] = (labels, now)
            uid = uids.get((labels[1], labels[2]))
            if uid is not None:
                self._uids[path] = uid
            if labels[1] in started:
                self._since[path] = started[labels[1]]
        for path in [p for p, (_, seen) in self._files.items() if now - seen > self.dcfg.forget_after]:
            del self._files[path]
            self._uids.pop(path, None)
            self._since.pop(path, None)
        jobs = {lab[1] for lab, _ in self._files.values()}
        for job in [j for j in self.job_progress_at if j not in jobs]:
            del self.job_progress_at[job]
        specs: List[SourceSpec] = []
        for source in (TRAIN, PLOG):
            files = sorted((p, lab[1], lab[2]) for p, (lab, _) in self._files.items() if lab[0] == source)
            if files or source in self.tailer.stats:
                specs.append(SourceSpec(name=source, paths=tuple(p for p, _, _ in files),
                                        path_labels=tuple(files), start="end",
                                        path_owners=tuple((p, self._uids[p]) for p, _, _ in files if p in self._uids),
                                        path_from=self._run_starts(p for p, _, _ in files)))
        if [s.paths for s in specs] != [s.paths for s in self.tailer.sources]:
            self.tailer.set_sources(specs)
        else:
            self.tailer.sources = specs


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 40
#: Its config: `probes.logs`; discovery feeds it.
SECTION: ProbeSection[LogsProbeConfig] = ProbeSection("logs", LogsProbeConfig, feed=2)


def build(ctx: ProbeContext) -> List[Probe]:
    """The logs probe: fed by discovery, or following the configured sources (watchdog.probes.logs)."""
    cfg = ctx.config.probes.logs
    if not cfg.enabled:
        return []
    if ctx.config.fed_by_discovery("logs"):
        return [DiscoveredLogsProbe(cfg, ctx.state_dir, ctx.config.discovery, ctx.discovery_feed(),
                                    config_secrets(ctx.config))]
    if not cfg.sources:
        return []
    return [LogsProbe(cfg, ctx.state_dir, config_secrets(ctx.config))]

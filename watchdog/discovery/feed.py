"""The latest discovery result, shared by the probes it feeds.

The process probe rescans every round (a job that starts is watched within one of its rounds); the
logs and heartbeat probes reuse a result younger than their own interval and rescan otherwise, so
each works even when another is configured explicitly. The npu probe hands in npu-smi's process
table (pid -> NPU), which discovery prefers over the environment's device variables.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace
from functools import partial
from typing import Any, Dict, Mapping, Optional, Tuple

from watchdog.discovery.model import Discovered, JobInfo
from watchdog.host.rankfiles import BEFORE_START_MARGIN, earlier_run_ends, still_from
from watchdog.discovery.procfs import ProcTable
from watchdog.discovery.names import GivenNames
from watchdog.discovery.scan import ScanOptions, discover, unique_names
from watchdog.privacy.redact import Redactor, config_secrets

log = logging.getLogger(__name__)


#: How long `seen_since` remembers a job a scan found (longer than any process interval).
SEEN_KEEP = 600.0


def own_pids() -> tuple:
    """This daemon and its ancestors: never ranks (a test harness may carry RANK itself)."""
    out = [os.getpid()]
    pid = os.getppid()
    for _ in range(64):
        if pid <= 1:
            break
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                text = fh.read().decode("utf-8", "replace")
            pid = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return tuple(out)


def scan_options(config: Any) -> ScanOptions:
    """Scan options from the config: job-name keys, an explicit job name, and who we are."""
    return ScanOptions(name_env=tuple(config.discovery.name_env), ignore=own_pids(), only=config.discovery.only_pairs,
                       first_job_name=config.job.name if config.job_name_explicit else None,
                       redact=partial(Redactor(config_secrets(config)).text, cut=False))


#: Beyond its jitter, how late a process-probe round (which rescans) may come before the logs
#: and heartbeat probes scan on their own.
REUSE_SLACK = 1.0


def feed_for(config: Any) -> "DiscoveryFeed":
    return DiscoveryFeed(scan_options(config), slack=float(config.probes.jitter) + REUSE_SLACK,
                         state_dir=config.paths.state_dir)


def naming_key(opts: ScanOptions) -> tuple:
    """The settings a job's name follows: the names given are forgotten when these change."""
    return (opts.first_job_name, tuple(opts.name_env), tuple(opts.only))


class DiscoveryFeed:
    def __init__(self, opts: ScanOptions, slack: float = 0.0, state_dir: Optional[str] = None):
        self.opts = opts
        #: `current` also reuses a result this much older than asked: the process probe rescans
        #: every interval plus up to its jitter, and a second scan just before it is wasted.
        self.slack = slack
        self._lock = threading.Lock()
        self._latest: Optional[Discovered] = None
        self._npu_by_pid: Dict[int, int] = {}
        #: The process table as of the last scan (a scan reads only what is new).
        self._table = ProcTable()
        self._mono = 0.0
        self.scans_total = 0
        self.errors_total = 0
        self._said_none = False
        self._names: Dict[str, int] = {}
        self._log_lock = threading.Lock()
        #: The names given to the jobs, kept while their ranks live and across restarts.
        self._given = GivenNames(state_dir, naming_key(opts))
        #: Grows when a scan finds a rank's log file or plog folder the one before did not: the
        #: logs probe then looks at once (a new job's first lines), not at its next rescan.
        self.logs_version = 0
        self._log_places: frozenset = frozenset()
        #: rank log path -> (device, inode, size, mtime) at the first scan that listed it: where
        #: an earlier run's lines end in a file a relaunch appends to (`run_start`).
        self._first_sight: Dict[str, Tuple[int, int, int, float]] = {}
        #: job name -> (the job as last found, when that scan began and ended: time.monotonic()):
        #: what any consumer's scan found lately, so the process probe also judges a job that
        #: started and ended between two of its own rounds (`seen_since`). Kept SEEN_KEEP seconds.
        self._seen: Dict[str, Tuple[JobInfo, float, float]] = {}
        #: When the scan behind `_latest` began: scans run in several probes' threads at once,
        #: and one that began earlier and ended later read an older process table.
        self._latest_began = float("-inf")

    def set_npu_processes(self, mapping: Mapping[int, int]) -> None:
        with self._lock:
            self._npu_by_pid = dict(mapping)

    def npu_processes(self) -> Dict[int, int]:
        """npu-smi's process table as last handed in (pid -> NPU)."""
        with self._lock:
            return dict(self._npu_by_pid)

    def refresh(self) -> Discovered:
        """Scan now; a failure is counted and raised (the calling probe reports it)."""
        with self._lock:
            npu = dict(self._npu_by_pid)
        began = time.monotonic()
        try:
            found = self._keep_names(discover(self.opts, npu, self._table))
        except Exception:
            with self._lock:
                self.errors_total += 1
            raise
        files = frozenset(p for j in found.jobs for r in j.ranks for p in r.logs)
        places = files | frozenset(d for j in found.jobs for d in j.plog_dirs)
        sighted = {p: v for p, v in self._first_sight.items() if p in files}
        for p in files - set(sighted):
            try:
                st = os.stat(p)
            except OSError:
                continue
            sighted[p] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime)
        with self._lock:
            self._first_sight = sighted
            ended = time.monotonic()
            if began >= self._latest_began:  # an older read of the table never replaces a newer one
                self._latest, self._mono, self._latest_began = found, ended, began
            self._seen = {n: v for n, v in self._seen.items() if ended - v[2] < SEEN_KEEP}
            self._seen.update((j.name, (j, began, ended)) for j in found.jobs
                              if j.name not in self._seen or began >= self._seen[j.name][1])
            self.scans_total += 1
            if places - self._log_places:
                self.logs_version += 1
            self._log_places = places
        with self._log_lock:
            self._log_change(found)
        return found

    def _keep_names(self, found: Discovered) -> Discovered:
        """Each job under the name it was first given (watchdog.discovery.names)."""
        jobs = self._given.keep(found.jobs, naming_key(self.opts), unique_names)
        return found if all(a is b for a, b in zip(jobs, found.jobs)) else replace(found, jobs=tuple(jobs))

    def current(self, max_age: float) -> Discovered:
        """The latest result when younger than `max_age` seconds (plus the slack), else a fresh scan."""
        with self._lock:
            latest, age = self._latest, time.monotonic() - self._mono
        if latest is not None and age < max_age + self.slack:
            return latest
        return self.refresh()

    def run_start(self, path: str, started_at: Optional[float]) -> int:
        """Where the lines of a job that started at `started_at` begin in its log file `path`: the
        file's size when discovery first listed it, if it was last written well before the job
        started (`BEFORE_START_MARGIN`: a relaunch appending to an earlier run's file) and is
        still that file, not shorter; or its size now by the same rule (`earlier_run_ends`: a
        launcher's file, which discovery does not list); else 0. Both the logs probe and the
        end-of-job judgement ask, so neither depends on which of them saw the job first."""
        if not started_at:
            return 0
        with self._lock:
            rec = self._first_sight.get(path)
        at = earlier_run_ends(path, started_at)
        if rec is not None and rec[2] and rec[3] < started_at - BEFORE_START_MARGIN:
            at = max(at, still_from(path, *rec[:3]))
        return at

    def seen_since(self, mono: float, before: float = float("inf")) -> Tuple[JobInfo, ...]:
        """The jobs found by scans that ended at or after `mono` and began before `before` (both
        time.monotonic()), as last found. The process probe asks with `before` = the start of its
        own scan: a job only a later-begun scan found may have started after its own read of the
        process table, and is not "gone before this round" (under load, scans of several probes'
        threads overlap: a later-begun one may end first)."""
        with self._lock:
            return tuple(j for j, began, ended in self._seen.values() if ended >= mono and began < before)

    def latest(self) -> Optional[Discovered]:
        with self._lock:
            return self._latest

    def _log_change(self, found: Discovered) -> None:
        """Say once that there is no job, and each time a job appears or goes (not every scan)."""
        names = {j.name: len(j.ranks) for j in found.jobs}
        for job in found.jobs:
            if self._names.get(job.name) != len(job.ranks):
                launcher = f", launcher pid {job.launcher.pid}" if job.launcher else ""
                log.info("discovery: job %s: %d ranks (pids %s)%s", job.name, len(job.ranks),
                         ",".join(str(r.pid) for r in job.ranks), launcher)
        for name in set(self._names) - set(names):
            log.info("discovery: job %s: no rank left", name)
        self._names = names
        if not found.jobs and not self._said_none:
            log.info("discovery: no training job on this node yet; watching the NPUs and the daemon itself")
            self._said_none = True
        elif found.jobs:
            self._said_none = False

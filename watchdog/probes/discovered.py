"""The process probe fed by discovery: ranks of every job on the node, followed over their life.

Like the selector-based probe, a rank is identified by (pid, start time) and followed by identity
once seen (zombies and stopped ranks stay visible). On top of that it follows each discovered job:
a job whose ranks all exited is kept (as ended, cleanly or not) for `discovery.forget_after`, so
its findings can resolve and its series stay readable (ranks at up 0), then forgotten. When ranks
leave, the probe gathers what their exit leaves behind (`EndEvidence`: heartbeats saying `done`,
end-of-training and failure lines in the last lines of the ranks' and launcher's logs, when each
rank left); whether that is a clean end or a failure is the liveness detector's decision
(`judge_end`), made on the evidence, not here.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Set, Tuple

from watchdog.host import clock, turns
from watchdog.config.schema import Config
from watchdog.discovery.feed import DiscoveryFeed
from watchdog.discovery.model import Discovered
from watchdog.discovery.procfs import rank_logs
from watchdog.core.findings import SEVERITY_RANK
from watchdog.parse.exits import STOP_SIGNALS, from_wait_status, parse_exit
from watchdog.parse.heartbeat_format import HeartbeatFormatError, parse_heartbeat
from watchdog.parse.restarts import parse_restart
from watchdog.logrules.matcher import Matcher, decode_line
from watchdog.logrules.normalize import normalize
from watchdog.observations import EndEvidence, JobState, ProcessInfo, ProcessObservation
from watchdog.probes.base import Collected, Probe, ProbeError
from watchdog.probes.gonestate import GoneRanks
from watchdog.probes.heartbeat import read_file
from watchdog.privacy.redact import Redactor, config_secrets
from watchdog.probes.procinfo import describe, follow
from watchdog.host.procevents import ProcExits
from watchdog.host.procstat import SAME_START, ProcStat, read_stat
from watchdog.host.rankfiles import rank_file, still_from

Identity = Tuple[int, float]
#: A rank alive this round: its stat line, job and rank number.
Live = Dict[Identity, Tuple[ProcStat, str, int]]
#: Bytes read from the end of each rank log when looking for an end-of-training line.
TAIL_BYTES = 8192
#: Second look after a rank exits while its peers live (a whole-job kill takes milliseconds).
SETTLE_SECONDS = 0.5
#: Longest line kept in the evidence (an end or failure line).
EVIDENCE_CHARS = 300


@dataclass
class _Job:
    name: str
    first_seen_at: float
    expected: Optional[int]
    launcher_pid: Optional[int]
    logs: Set[str] = field(default_factory=set)
    #: rank -> heartbeat file named by its environment.
    heartbeats: Dict[int, str] = field(default_factory=dict)
    #: The ranks' user: the files read for the job (heartbeats, log tails) must be theirs.
    uid: Optional[int] = None
    ended_at: Optional[float] = None
    #: Every rank number seen in this run of the job; the launcher's own stdout/stderr files.
    ranks: Set[int] = field(default_factory=set)
    #: Every rank process seen in this run, as (pid, start time): after the job ended, only a
    #: process it never had starts a new run (a scan that still lists a rank on its way out is
    #: the same run; a reused pid is another process).
    pids: Set[Tuple[int, Optional[float]]] = field(default_factory=set)
    launcher_logs: Set[str] = field(default_factory=set)
    #: log path -> where this run's lines begin in it (a relaunch appending to an earlier run's
    #: file: that run's failure is not how this one ended). Absent: from the start.
    log_from: Dict[str, int] = field(default_factory=dict)
    #: Ranks gone whose heartbeat said `done`; the others, with when they were seen gone.
    done: Set[int] = field(default_factory=set)
    left: Dict[int, float] = field(default_factory=dict)
    #: The evidence about the ranks gone (made again when another rank leaves).
    end: Optional[EndEvidence] = None
    end_stale: bool = False
    #: Look at the logs once more the round after the job ended: a launcher prints its success
    #: line after it reaped the last rank, a moment after this probe may have looked.
    relook: bool = False
    #: The HCCL variables the ranks' environments set (watchdog.parse.hccl reads them per job); empty
    #: when none does, so the config or the CANN defaults apply.
    hccl_env: Tuple[Tuple[str, str], ...] = ()
    #: rank -> start time of its newest process: the earliest is when the current attempt of the
    #: job started (an elastic agent's restart replaces every rank's process).
    started: Dict[int, float] = field(default_factory=dict)
    #: rank pid -> its NPU: npu-smi's process table wins, else the first the environment gave;
    #: kept while the rank lives, so a card that drops out of npu-smi still names its job.
    npus: Dict[int, int] = field(default_factory=dict)
    #: The job started and ended between two rounds of this probe (another consumer's scan found
    #: it): its processes' exits were never watched, so its exit statuses are unknown.
    unwatched: bool = False


def log_tail(path: str, size: int = TAIL_BYTES, uid: Optional[int] = None, start: int = 0) -> bytes:
    """The last `size` bytes of a log file after `start` (where this run's lines begin: see
    `DiscoveryFeed.run_start`; ignored when the file is shorter now, rewritten since), b"" when it
    cannot be read, or is not the ranks' own regular file: see watchdog.host.rankfiles."""
    try:
        with rank_file(path, uid) as fh:
            fh.seek(0, 2)
            end = fh.tell()
            fh.seek(max(0, end - size, start if start <= end else 0))
            return fh.read(size)
    except OSError:
        return b""


def written_since(path: str, since: Optional[float]) -> bool:
    """Whether a log file was written since the current attempt of its job started: a file last
    written before (an earlier attempt's, as torchrun's `--log-dir` keeps one folder per attempt)
    holds no line of how this attempt ended. Unknown (no attempt start, no stat): yes."""
    if since is None:
        return True
    try:
        return os.stat(path).st_mtime >= since
    except OSError:
        return True


def end_line(tails: List[bytes], patterns: List["re.Pattern[str]"]) -> str:
    """Pure: the last end-of-training line in the log tails ("" when there is none)."""
    for data in tails:
        for raw in reversed(normalize(data).splitlines()):
            line = decode_line(raw, 4096)
            if any(p.search(line) for p in patterns):
                return line.strip()[:EVIDENCE_CHARS]
    return ""


def handled_until(data: bytes, ends: List["re.Pattern[str]"]) -> int:
    """Pure: the offset in a (normalized) tail after its last line that says what came before it
    was lived through: an end-of-training line (a handled traceback, then `Training completed`)
    or the agent's restart of the worker group (the failure it restarts on pages as itself and
    as a restart; a later attempt may finish cleanly). 0 when there is none."""
    at = len(data)
    for raw in reversed(data.splitlines(keepends=True)):
        at -= len(raw)
        line = decode_line(raw.rstrip(b"\r\n"), 4096)
        if any(p.search(line) for p in ends) or parse_restart(line) is not None:
            return at + len(raw)
    return 0


def failure_line(tails: List[bytes], matcher: Optional[Matcher], ends: List["re.Pattern[str]"] = ()) -> str:
    """Pure: the gravest line of the log tails a failure rule matches, as `rule: line` ("" if
    none): the most severe, a root cause before a cascade (the OOM, not the traceback header
    above it), else the first. Only lines after a tail's last end-of-training or restart line
    count (`handled_until`, with `ends` the end patterns): a failure the job went on from is not
    how it ended."""
    if matcher is None:
        return ""
    best: Optional[Tuple[Tuple[int, int, int], str]] = None
    for data in tails:
        data = normalize(data)  # as the logs probe reads it: no colour codes, no NULs
        since = handled_until(data, list(ends))
        for start, stop in matcher.candidates(data):
            if start < since:
                continue
            line = decode_line(data[start:stop], matcher.max_line_bytes)
            for rule in matcher.match_text(line):
                # Ties go to a line that names who went and how (a launcher's `failed (exitcode:
                # -11) local_rank: 1`, not its summary table's `train.py FAILED`).
                rank = (SEVERITY_RANK.get(rule.severity, 0), 1 if rule.role == "root" and rule.kind == "line" else 0,
                        1 if parse_exit(line) is not None else 0)
                if best is None or rank > best[0]:
                    best = (rank, f"{rule.id}: {line.strip()}"[:EVIDENCE_CHARS])
    return best[1] if best is not None else ""


def failure_matcher(config: Config, generic: bool = False) -> Optional[Matcher]:
    """The log rules (shipped packs and the user's) whose match in a rank's last lines is a
    failure sign: severity warning or critical, exact wordings only; with `generic`, the generic
    vocabulary rules instead (a failure's shape, which a handled error has too: a cause to name
    when something else says the job failed, never the sign itself). Rules that fire on a count
    (`threshold`) or a loss scale's trend (`trend`) are left out: one of their lines is routine
    (a dynamic loss scaler's single overflow skip, `number of skipped iterations: 1`), and the
    last lines hold one line, not the run the rule needs.

    On Python's engine whatever the logs probe runs on: the input is a tail of TAIL_BYTES per
    file, read when ranks leave, and the two RE2 programs a busy log needs would hold 3.2 MB of
    the idle daemon's memory for them (the engines give the same results:
    tests/unit/test_log_rules_shapes.py). The price is per tail: about 1 ms on a training log's
    lines, up to about 25 ms on crafted ones (short lines of a rule's literal, `nan` or `ecc`;
    the generic shapes up to about 40 ms on either engine), linear in its size."""
    lc = config.probes.logs
    rules = [r for r in lc.ruleset() if SEVERITY_RANK.get(r.severity, 0) >= SEVERITY_RANK["warning"]
             and r.fallback == generic and r.threshold is None and r.trend is None]
    return Matcher(rules, engine="re", max_line_bytes=lc.max_line_bytes) if rules else None


def says_done(path: str, uid: Optional[int] = None) -> bool:
    """The heartbeat file declares phase `done` (read here, at the exit, because the heartbeat
    probe may not have read the last beat before the process probe sees the rank gone)."""
    try:
        data, _, _ = read_file(path, uid)
        return parse_heartbeat(data).phase == "done"
    except (OSError, HeartbeatFormatError):
        return False


class DiscoveredProcessProbe(Probe):
    name = "process"

    def __init__(self, config: Config, feed: DiscoveryFeed, state_dir: Optional[str] = None):
        self.feed = feed
        self._apply(config)
        #: The ranks lost while their peers run, saved for the next run of the daemon.
        self._gone_state = GoneRanks(state_dir)
        self._known: Dict[Identity, ProcessInfo] = {}
        #: Command name of each known rank when it was described (a change means an exec).
        self._comms: Dict[Identity, str] = {}
        self._gone: Dict[Tuple[str, int], ProcessInfo] = {}
        self._jobs: Dict[str, _Job] = {}
        #: When this probe last scanned (time.monotonic()): the jobs other scans found since then
        #: and gone by now are judged too (`_track_missed`).
        self._scanned_at = 0.0
        #: log path -> (device, inode, size, when) as an ended job left it: a run relaunched into
        #: the same files within seconds (a retry loop) begins its lines there (`_mark_run_start`).
        self._ended_files: Dict[str, Tuple[int, int, int, float]] = {}
        self._first_seen_at: Optional[float] = None
        #: Exit statuses of processes this daemon is not the parent of (root only; else unavailable).
        self._exits = ProcExits.start()

    def _apply(self, config: Config) -> None:
        self.cfg = config.probes.process
        self.dcfg = config.discovery
        self.interval, self.timeout = self.cfg.interval, self.cfg.timeout
        self._end_res = [re.compile(p) for p in self.dcfg.end_patterns]
        self._failures = failure_matcher(config)
        self._shapes = failure_matcher(config, generic=True)
        #: Log text that goes into a page (the failure and shape lines) loses the config's secrets
        #: and secret-looking assignments first, as the cause's last lines do.
        self._redactor = Redactor(config_secrets(config))

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, DiscoveredProcessProbe):
            return False
        self.cfg, self.dcfg, self.interval, self.timeout = new.cfg, new.dcfg, new.interval, new.timeout
        self._end_res, self._failures, self._shapes = new._end_res, new._failures, new._shapes
        self._redactor = new._redactor
        new.discard()  # one listener per daemon: the running probe keeps its own
        return True

    def close(self) -> None:
        self._exits.close()

    # -- the round ------------------------------------------------------------------------------
    def collect(self) -> Collected:
        now = clock.now()
        since, self._scanned_at = self._scanned_at, time.monotonic()
        try:
            found = self.feed.refresh()
        except Exception as exc:
            raise ProbeError(f"discovery failed: {type(exc).__name__}: {exc}") from None
        live = self._follow_known()
        if self._partly_gone(live):
            # A rank went while peers live: look again shortly. A job killed as a whole (its
            # process group, the scheduler) is then seen as gone at once, not as a missing rank
            # followed by a gone job a round later.
            turns.pause(SETTLE_SECONDS)
            live = self._follow_known()
        followed = {ident[0] for ident in live}  # checked against their start time just now
        self._track_missed(found, since, now)
        for job in found.jobs:
            self._track_job(job, now)
            for r in job.ranks:
                if r.pid in followed:
                    continue
                try:
                    st = read_stat(r.pid)
                except (OSError, ValueError):
                    continue  # gone, or not ours to read
                live.setdefault((r.pid, st.create_time), (st, job.name, r.rank))
        infos = self._describe_all(live)
        self._comms = {ident: live[ident][0].comm for ident in infos}
        self._update_gone(infos, now)
        self._end_jobs(infos, now)
        for t in self._jobs.values():
            if t.end_stale or t.relook:
                t.relook = t.end_stale and t.ended_at is not None
                t.end, t.end_stale = self._evidence(t), False
                if t.ended_at is not None:
                    self._note_ended_files(t, now)
        self._known = infos
        self._gone_state.save({name: (t.pids, t.left) for name, t in self._jobs.items()}, self._gone)
        # Only the exits of what is watched wake the listener (the host's other exits are
        # dropped in the kernel): the ranks alive now and their launchers.
        self._exits.watch([i.pid for i in infos.values()] + [t.launcher_pid for t in self._jobs.values() if t.launcher_pid])
        if infos and self._first_seen_at is None:
            self._first_seen_at = now
        return Collected(self._observation(infos), self._summary(infos, found))

    def _partly_gone(self, live: Live) -> bool:
        gone_jobs = {p.job for i, p in self._known.items() if i not in live}
        return any(job in gone_jobs for _, job, _ in live.values())

    def _follow_known(self) -> Live:
        """The known ranks still there: one stat read each (gone, or the pid reused by another
        process, and the rank is not followed)."""
        out: Live = {}
        for ident, prev in self._known.items():
            st = follow(ident)
            if st is not None:
                out[ident] = (st, prev.job or "", prev.rank if prev.rank is not None else -1)
        return out

    def _track_missed(self, found, since: float, now: float) -> None:
        """A job another consumer's scan found since this probe's last round, and gone before this
        one (a job shorter than the process interval: a start-up crash, a short run), is tracked
        now and so judged as ended: without this it was never seen, and its end never said."""
        current = {j.name for j in found.jobs}
        for job in self.feed.seen_since(since, before=self._scanned_at):
            if job.name in current or job.name in self._jobs:
                continue
            self._track_job(job, now)
            self._jobs[job.name].unwatched = True

    def _track_job(self, job, now: float) -> None:
        t = self._jobs.get(job.name)
        if t is None or (t.ended_at is not None and any((r.pid, r.started_at) not in t.pids for r in job.ranks)):
            t = _Job(name=job.name, first_seen_at=now, expected=job.local_world_size,
                     launcher_pid=job.launcher.pid if job.launcher else None)
            self._jobs[job.name] = t
            for key in [k for k in self._gone if k[0] == job.name]:
                del self._gone[key]  # a new run of the same job name starts afresh
            self._restore_gone(t, job)
            if job.launcher is not None:
                try:
                    t.launcher_logs.update(rank_logs(job.launcher.pid))
                except OSError:
                    pass  # gone already, or not ours to read: the ranks' logs still count
                self._mark_run_start(t, t.launcher_logs, job.started_at)
        t.hccl_env = () if job.hccl.source != "environment" else tuple(
            (k, str(v)) for k, v in (("HCCL_EXEC_TIMEOUT", job.hccl.exec_timeout_s),
                                     ("HCCL_CONNECT_TIMEOUT", job.hccl.connect_timeout_s)) if v is not None)
        table: Optional[Dict[int, int]] = None
        for r in job.ranks:
            t.ranks.add(r.rank)
            t.pids.add((r.pid, r.started_at))
            if r.started_at is not None and r.started_at > t.started.get(r.rank, 0.0):
                t.started[r.rank] = r.started_at
            if r.npu is not None:
                table = self.feed.npu_processes() if table is None else table
                if r.pid in table or r.pid not in t.npus:
                    t.npus[r.pid] = r.npu
            self._mark_run_start(t, [p for p in r.logs if p not in t.logs], job.started_at)
            t.logs.update(r.logs)
            if r.uid is not None:
                t.uid = r.uid
            if r.heartbeat:
                t.heartbeats[r.rank] = r.heartbeat

    def _mark_run_start(self, t: _Job, paths: Iterable[str], started_at: Optional[float]) -> None:
        """Note where this run's lines begin in log files first seen now: where an ended job of
        this daemon's left them (the same file, not shorter), else where an earlier run's end
        (`DiscoveryFeed.run_start`)."""
        for p in paths:
            at = self.feed.run_start(p, started_at)
            prev = self._ended_files.get(p)
            if prev is not None:
                at = max(at, still_from(p, *prev[:3]))
            if at:
                t.log_from[p] = at

    def _note_ended_files(self, t: _Job, now: float) -> None:
        """Remember how an ended job left its log files (at its end and at the look a round
        later, after its launcher's last report); forgotten after `discovery.forget_after`."""
        for p in t.logs | t.launcher_logs:
            try:
                st = os.stat(p)
            except OSError:
                continue
            self._ended_files[p] = (st.st_dev, st.st_ino, st.st_size, now)
        for p in [p for p, v in self._ended_files.items() if now - v[3] > self.dcfg.forget_after]:
            del self._ended_files[p]

    def _restore_gone(self, t: _Job, job) -> None:
        """The ranks this job lost before the daemon restarted (watchdog.probes.gonestate): gone
        still, with the pid and the time they were seen gone, so the page they had goes on."""
        here = {r.rank for r in job.ranks}
        for rank, left_at, info in self._gone_state.take(job.name, [(r.pid, r.started_at) for r in job.ranks]):
            if rank in here:
                continue  # back (restarted) meanwhile
            self._gone[(job.name, rank)] = replace(info, job=job.name)
            t.ranks.add(rank)
            t.left[rank] = left_at
            t.pids.add((info.pid, info.create_time))
            t.end_stale = True

    def _describe_all(self, live: Live) -> Dict[Identity, ProcessInfo]:
        """One ProcessInfo per (job, rank): a running process wins over a zombie, then the newest."""
        by_key: Dict[Tuple[str, int], Tuple[Identity, ProcessInfo]] = {}
        for ident, (st, job, rank) in live.items():
            try:
                tracked = self._jobs.get(job)
                info = describe(st, self._known.get(ident), self._comms.get(ident), rank, job=job,
                                hccl_env=tracked.hccl_env if tracked is not None else (), redactor=self._redactor)
                if tracked is not None and ident[0] in tracked.npus:
                    info = replace(info, npu=tracked.npus[ident[0]])
            except (OSError, ValueError):
                continue
            key = (job, rank)
            old = by_key.get(key)
            if old is None or (old[1].state == "zombie", old[1].create_time) < (info.state == "zombie", info.create_time):
                by_key[key] = (ident, info)
        return {ident: info for ident, info in by_key.values()}

    def _dead_zombies(self, infos: Dict[Identity, ProcessInfo]) -> Set[Identity]:
        """Zombie ranks whose exit the kernel reported (their launcher does not reap them) while
        peers of theirs run: gone now, with their exit status, not only a `rank_zombie` after
        `zombie_after`. (With no peer running the job has ended: `_end_jobs` says so.)"""
        out: Set[Identity] = set()
        running = {i.job for i in infos.values() if i.state != "zombie"}
        for ident, i in infos.items():
            if i.state == "zombie" and i.rank is not None and i.job in running:
                ex = self._exits.get(i.pid)
                if ex is not None and ex.time >= i.create_time - SAME_START:
                    out.add(ident)
        return out

    def _update_gone(self, infos: Dict[Identity, ProcessInfo], now: float) -> None:
        dead = self._dead_zombies(infos)
        alive = {(i.job, i.rank) for ident, i in infos.items() if ident not in dead}
        for ident in dead:
            info, job = infos[ident], self._jobs.get(infos[ident].job or "")
            if job is not None and (info.job, info.rank) not in alive:
                self._left(job, info.rank, now)  # type: ignore[arg-type]
                self._gone[(info.job or "", info.rank)] = info  # type: ignore[index]
        for ident, old in self._known.items():
            if ident in infos or old.rank is None:
                continue
            key = (old.job or "", old.rank)
            job = self._jobs.get(key[0])
            if key in alive or job is None:
                continue
            self._left(job, old.rank, now)
            self._gone[key] = old  # shown (up 0) until forgotten
        for key in [k for k in self._gone if k in alive]:
            del self._gone[key]  # restarted
            job = self._jobs.get(key[0])
            if job is not None:
                job.done.discard(key[1])
                job.left.pop(key[1], None)
                job.end_stale = True

    def _left(self, job: _Job, rank: int, now: float) -> None:
        """A rank left: read its heartbeat now (the heartbeat probe may not have read the last
        beat before this round saw the rank gone) and note when."""
        if rank in job.done or rank in job.left:
            return
        hb = job.heartbeats.get(rank)
        if hb is not None and says_done(hb, job.uid):
            job.done.add(rank)
        else:
            job.left[rank] = now
        job.end_stale = True

    def _evidence(self, job: _Job) -> EndEvidence:
        """What the departed ranks left behind, read once per departure (not every round)."""
        since = min(job.started.values()) - SAME_START if job.started else None
        tails = [log_tail(p, uid=job.uid, start=job.log_from.get(p, 0))
                 for p in sorted(job.logs) if written_since(p, since)]
        launcher = [log_tail(p, uid=job.uid, start=job.log_from.get(p, 0))
                    for p in sorted(job.launcher_logs - job.logs) if written_since(p, since)]
        times = list(job.left.values())
        (first, first_zh), (stop, stop_zh), source, exits = self._exit_statuses(job)
        return EndEvidence(
            ranks=len(job.ranks), gone=len(job.done) + len(job.left), done=len(job.done),
            heartbeats=len(job.heartbeats), end_line=self._redactor.text(end_line(tails + launcher, self._end_res)),
            failure_line=self._redactor.text(failure_line(tails + launcher, self._failures, self._end_res)),  # torchrun's too
            shape_line=self._redactor.text(failure_line(tails + launcher, self._shapes, self._end_res)),
            first_left_at=min(times) if times else None, last_left_at=max(times) if times else None,
            first_exit=first, first_stop=stop, first_exit_zh=first_zh, first_stop_zh=stop_zh,
            exit_source=source, exits=exits)

    def _exit_statuses(self, job: _Job) -> Tuple[Tuple[str, str], Tuple[str, str], str, Tuple[Tuple[int, str], ...]]:
        """How the job's departed processes ended (the kernel's process events): the first to go
        when it failed, the first to go when a stop request ended it (each in English and
        Chinese), the source, and each known (pid, status)."""
        none = ("", "")
        if self._exits.unavailable is not None or job.unwatched:
            return none, none, "", ()
        who = {p.pid: p.rank for (name, _), p in self._gone.items() if name == job.name}
        who.update({i.pid: i.rank for i in self._known.values() if i.job == job.name and i.state == "zombie"})
        if job.launcher_pid:
            who[job.launcher_pid] = None
        seen = sorted(self._exits.of(who).values(), key=lambda e: e.time)
        exits = tuple((e.pid, from_wait_status(e.status).words()) for e in seen)
        if not seen:
            return none, none, "process events", exits
        status, pid = from_wait_status(seen[0].status), seen[0].pid
        rank = who[pid]
        said = (f"{'the launcher' if rank is None else f'rank {rank}'} (pid {pid}) {status.words()}",
                f"{'启动器' if rank is None else f'rank {rank}'}（pid {pid}）{status.words('zh')}")
        if status.signal in STOP_SIGNALS:
            return none, said, "process events", exits
        return (said if status.failed else none), none, "process events", exits

    def _end_jobs(self, infos: Dict[Identity, ProcessInfo], now: float) -> None:
        running = {i.job for i in infos.values() if i.state != "zombie"}
        for name, t in list(self._jobs.items()):
            if name in running:
                t.ended_at = None
                continue
            if t.ended_at is None:
                t.ended_at = now
                for r in t.ranks:  # ranks left as zombies never went through _update_gone
                    self._left(t, r, now)
            elif now - t.ended_at >= self.dcfg.forget_after:
                del self._jobs[name]
                for key in [k for k in self._gone if k[0] == name]:
                    del self._gone[key]
                for ident in [i for i, p in infos.items() if p.job == name]:
                    del infos[ident]

    def _observation(self, infos: Dict[Identity, ProcessInfo]) -> ProcessObservation:
        procs = tuple(sorted(infos.values(), key=lambda i: (i.job or "", i.rank if i.rank is not None else 1 << 30)))
        gone = tuple(self._gone[k] for k in sorted(self._gone))
        jobs = tuple(JobState(name=t.name, first_seen_at=t.first_seen_at, expected=t.expected, ended_at=t.ended_at,
                              launcher_pid=t.launcher_pid, end=t.end)
                     for t in sorted(self._jobs.values(), key=lambda t: t.first_seen_at))
        return ProcessObservation(processes=procs, expected=None, gone=gone, first_seen_at=self._first_seen_at,
                                  jobs=jobs, discovered=True)

    @staticmethod
    def _summary(infos: Dict[Identity, ProcessInfo], found: Discovered) -> str:
        if not found.jobs and not infos:
            return f"no training job ({found.processes_scanned} processes scanned)"
        parts = []
        for job in found.jobs:
            parts.append(f"{job.name}: {len(job.ranks)} ranks" + (f" (launcher {job.launcher.pid})" if job.launcher else ""))
        return "; ".join(parts) or f"{len(infos)} ranks exiting"

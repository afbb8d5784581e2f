"""Following log files: globs, rotation, truncation, restarts, bounded work per round.

Identity of a file is (device, inode) plus a fingerprint of its first bytes (inodes are reused
quickly on ext4/xfs, so an inode alone would silently skip a recreated file). Per round:
- every source's globs are expanded again (a new plog file appears per process);
- a path whose inode changed was rotated (rename and create, or delete and re-create): the old
  file is read through the handle still open before the new one, and stays followed while its
  writer (which may keep its handle for a while) still appends to it, until it has been quiet for
  `drain_grace` seconds and no process holds it open for writing (`watchdog.host.openfiles`:
  `python train.py > train.log` writes on to the renamed or deleted file after any quiet); a
  rotated file that reappears under a matched name (`train.log.1` for `train.log*`) continues at
  its offset instead of being read again;
- a file smaller than our offset was truncated in place (copytruncate): read again from 0;
- a path that vanished is drained and forgotten; a path that does not exist yet is no error;
- only complete lines are handed on: a partial last line stays unread until its newline arrives
  (a line longer than one slice is cut, so a huge line cannot stall the reader);
- at most `round_bytes` are read per round, in slices of `slice_bytes` (never a whole backlog).
Offsets are persisted (0600 JSON) so that after a restart each known file continues where it was
left, unless it was written again from its start meanwhile (the bytes before the offset differ, or
a process started since the save writes it without O_APPEND: a relaunch with `>`); a file first
seen at daemon start (not in the saved state) is read from its end. A file that left the followed
set and comes back (a job relaunched into an earlier run's log folder, appending) continues where
reading stopped (`watchdog.logrules.retired`); a discovered file first seen later whose last
write is older than its job is read from its end (what it holds is an earlier run's). Descriptors are budgeted
(`fdbudget.log_file_budget`): files beyond are read by polling, opened and closed each round. A save that
fails (state folder read-only or full) never stops the reading: matching goes on in memory,
`state_error` says why, and the next successful save clears it.
A directory of a configured path that cannot be listed, or a file that cannot be opened, is an
error of that path (`errors`, `error_sources`) instead of silently matching nothing.
"""

from __future__ import annotations

import errno
import glob
import logging
import os
import stat
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from watchdog.compat import sha1_hex  # not hashlib: see watchdog.compat
from watchdog.service import fdbudget, statefiles
from watchdog.logrules.extract import StreamState
from watchdog.logrules.retired import FILE_NAME as RETIRED_FILE, RetiredFiles
from watchdog.host import openfiles
from watchdog.host.rankfiles import check_fd, open_rank_file

log = logging.getLogger(__name__)

FINGERPRINT_BYTES = 256
STATE_VERSION = 1
#: The offsets file is fsynced at most this often (see `Tailer.save_state`).
SYNC_SECONDS = 60.0
#: How long a rotated-away file is still followed after its last growth (its writer may keep the
#: old handle until it reopens: Python's WatchedFileHandler checks per record, others never).
DRAIN_GRACE = 30.0


@dataclass(frozen=True)
class SourceSpec:
    name: str
    paths: Tuple[str, ...]
    #: Regex with one group: the rank, searched in the file's path (last match wins).
    rank_pattern: Optional[str] = None
    #: Where a file first seen at daemon start is read from: "end" or "beginning".
    start: str = "end"
    #: Exact (path, job, rank) of discovered files: the rank comes from discovery, not the name.
    path_labels: Tuple[Tuple[str, Optional[str], Optional[str]], ...] = ()
    #: (path, uid) of discovered files: each must belong to the user of the rank that writes it
    #: (see `watchdog.host.rankfiles`); files of configured sources have no known owner.
    path_owners: Tuple[Tuple[str, int], ...] = ()
    #: (path, offset) of discovered files not followed yet whose job's lines begin after an
    #: earlier run's (a relaunch appending to its file): read from there, not from the start.
    path_from: Tuple[Tuple[str, int], ...] = ()


@dataclass
class Followed:
    source: str
    path: str
    rank: Optional[str]
    dev: int
    ino: int
    offset: int
    fp: str = ""
    fp_len: int = 0
    stream: StreamState = field(default_factory=StreamState)
    fh: Optional[int] = None
    last_change: float = 0.0
    behind_since: Optional[float] = None
    #: When the file was rotated away (set while it is in `Tailer.draining`).
    drain_since: Optional[float] = None
    #: The discovered job writing this file (None for configured sources).
    job: Optional[str] = None
    #: The user the file must belong to (the writing rank's; None: any, configured sources).
    uid: Optional[int] = None
    #: Beyond the descriptor budget: opened, read and closed each round (`Tailer.max_open`).
    polled: bool = False
    #: mtime of the file at its last read (a polled file whose size and mtime stay is not opened).
    mtime_ns: int = 0
    #: Hash and length of the bytes just before `offset`: a file rewritten from its start while
    #: the daemon was down (same inode, same first bytes) differs there.
    tail_fp: str = ""
    tail_len: int = 0
    #: When a process was last found writing this file (it is kept open while one does).
    written_at: float = 0.0
    #: (offset, end): the bytes from `offset` to `end` hold no newline (a partial last line,
    #: held for its newline). Valid while `offset` is unchanged; see `Tailer._still_partial`.
    no_newline: Tuple[int, int] = (-1, -1)


@dataclass
class SourceStats:
    """Cumulative per configured source (never per file: plog names are unbounded)."""

    bytes_total: int = 0
    lines_total: int = 0
    rotations_total: int = 0
    read_errors_total: int = 0
    files_followed: int = 0
    #: Followed files beyond the descriptor budget, read by polling (see `Tailer.max_open`).
    files_polled: int = 0
    read_lag_seconds: float = 0.0
    last_line_at: Optional[float] = None
    lines_round: int = 0


#: consume(followed, data, stop): the complete lines read are `data[:stop]`. The slice is not cut
#: to size (a copy of up to a slice, 8 MiB, per read); a consumer that feeds an Extractor lets it
#: count the lines (StreamState.lines_fed), else the tailer counts them.
Consumer = Callable[[Followed, bytes, int], None]


def static_dir(pattern: str) -> str:
    """The directory of a path pattern up to its first glob character (what must be listable)."""
    parts = pattern.split(os.sep)
    fixed = []
    for part in parts[:-1]:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return os.sep.join(fixed) or (os.sep if pattern.startswith(os.sep) else ".")


def _skip_hole(f: Followed, size: int) -> bool:
    """Move past a hole at f's offset (a sparse region: zeros nobody wrote); True when it moved.
    A copytruncate under a writer that does not append leaves one as large as the log was, and
    reading it cost minutes of a core at 64 MiB a round while the rank's new lines waited behind
    it (a NaN paged five minutes late). Asked only when a slice starts with HOLE_PROBE zero bytes
    (no log line is that): on ZFS, SEEK_DATA on a file being written waits for a transaction
    group, and some releases reported dirty data as a hole. Where the filesystem cannot say (no
    SEEK_DATA), everything is data."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None or f.fh is None:
        return False
    try:
        nxt = os.lseek(f.fh, f.offset, seek_data)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: no data after the offset, the rest is a hole
            return False
        nxt = size
    nxt = min(nxt, size)
    if nxt <= f.offset:
        return False
    log.info("log %s: skipped a hole of %d bytes (a sparse region, as a copytruncate leaves it)",
             f.path, nxt - f.offset)
    f.offset = nxt
    # The bytes before the offset are the hole's zeros now, not the line the fingerprint hashed:
    # a restart must not take the file for rewritten (and read it again from 0).
    f.tail_fp, f.tail_len = "", 0
    return True


#: Zero bytes at a slice's start that make the tailer ask the filesystem for a hole.
HOLE_PROBE = 4096


def _error_key(pattern: str) -> str:
    """Where a configured path's error is kept: a glob's fixed directory (the listing failed), or a
    plain path itself. Keyed by its directory, a plain path that cannot be read (a symlink loop)
    and a readable sibling in the same folder set and cleared one error in turn, logging both
    four times a second, and the unreadable path never stayed counted."""
    return static_dir(pattern) if glob.has_magic(pattern) else pattern


def _fingerprint(fd: int, length: int) -> str:
    return _digest(os.pread(fd, length, 0)) if length > 0 else ""


def _is_saved_file(fd: int, st: os.stat_result, saved: dict) -> bool:
    """Whether the open file is the one the offsets were saved for: the same device and inode,
    and the same first bytes (an inode is reused by a file made after a delete)."""
    if (saved.get("dev"), saved.get("ino")) != (st.st_dev, st.st_ino):
        return False
    fp_len = int(saved.get("fp_len") or 0)
    return not fp_len or st.st_size < fp_len or _fingerprint(fd, fp_len) == saved.get("fp")


def _truncating_writer(path: str, since: object) -> bool:
    """Whether a process started after `since` (epoch seconds) writes `path` without O_APPEND: a
    relaunch with `>` that wrote again from the start, byte for byte as the last run did up to
    where reading stopped (a run that fails the same way each time), is not read on from there."""
    if not isinstance(since, (int, float)) or isinstance(since, bool) or since != since:
        return False
    link = os.path.realpath(path)
    return any(not w.appends for w in openfiles.writers({link: None}, None, started_after=float(since)).get(link, ()))


def _record(f: Followed) -> dict:
    """What the offsets file (and the retired files' memory) keeps of a followed file."""
    return {"source": f.source, "dev": f.dev, "ino": f.ino, "offset": f.offset, "fp": f.fp,
            "fp_len": f.fp_len, "line": f.stream.line_no, "tail_fp": f.tail_fp, "tail_len": f.tail_len,
            **({"job": f.job, "rank": f.rank} if f.job is not None else {})}


def _digest(data: bytes) -> str:
    return sha1_hex(data)


def _valid_files(files: object) -> bool:
    """The saved offsets have the shape save_state writes (a damaged file must not crash _start)."""
    if not isinstance(files, dict):
        return False
    for v in files.values():
        if not isinstance(v, dict) or not all(isinstance(v.get(k, 0), int) and not isinstance(v.get(k, 0), bool)
                                              and v.get(k, 0) >= 0 for k in ("offset", "fp_len", "dev", "ino", "tail_len")):
            return False  # a negative offset would make every read of the file fail
    return True


class Tailer:
    def __init__(self, sources: Sequence[SourceSpec], state_path: Optional[str] = None,
                 slice_bytes: int = 8 << 20, round_bytes: int = 64 << 20, idle_close: float = 300.0,
                 drain_grace: float = DRAIN_GRACE):
        self.sources = list(sources)
        self.state_path = state_path
        self.slice_bytes = max(4096, slice_bytes)
        self.round_bytes = max(self.slice_bytes, round_bytes)
        self.idle_close = idle_close
        self.drain_grace = drain_grace
        self.files: Dict[str, Followed] = {}
        self.draining: List[Followed] = []
        self.stats: Dict[str, SourceStats] = {s.name: SourceStats() for s in self.sources}
        #: path (or directory) -> why it cannot be read now; `error_sources` maps it to its source.
        self.errors: Dict[str, str] = {}
        self.error_sources: Dict[str, str] = {}
        #: Why the last offsets save failed, said once per episode (see `state_error`).
        self._save = statefiles.SaveEpisode(
            "log offsets", state_path or "", log, "; log lines are still read and matched, offsets are kept in memory")
        #: When the offsets file was last fsynced (None: not yet).
        self._synced_at: Optional[float] = None
        self.state_save_errors_total = 0
        self._gone: set = set()
        #: Paths a source matches that are not regular files (see `expand`): reported, not read.
        self._odd: set = set()
        self._polled = False
        #: Descriptors of followed files open now, and at most how many may stay open between
        #: rounds (None: half of what the open-files limit leaves, `fdbudget.log_file_budget`).
        self.held = 0
        self.max_open: Optional[int] = None
        self._limit = 1 << 30
        self._polling_said = False
        self._rank_res = {s.name: re.compile(s.rank_pattern, re.IGNORECASE) if s.rank_pattern else None
                          for s in self.sources}
        #: Extra state saved in the same atomic write as the offsets (the log probe's active
        #: matches: a match whose line lies before a persisted offset is never read again, so it
        #: must survive a restart with the offset). Set by the owner; restored into `saved_extra`.
        self.extra_state: Optional[Callable[[], dict]] = None
        self.saved_extra: dict = {}
        #: When the saved offsets were written, and the processes that began writing a saved file
        #: from its start since then (a relaunch while the daemon was down; see `_start`).
        self._saved_at: Optional[float] = None
        self._relaunched: Optional[Dict[str, List[openfiles.Writer]]] = None
        #: The saved offsets, read at the first round (`load_saved`), not when the tailer is
        #: built: a tailer built for a reload starts from what the running one saved last.
        self._saved: Optional[Dict[str, dict]] = None
        #: Where reading stopped in files no longer followed (a relaunch appending to them).
        self.retired = RetiredFiles(os.path.join(os.path.dirname(state_path), RETIRED_FILE) if state_path else None)

    def load_saved(self) -> None:
        """Read the saved offsets (and `saved_extra`) once, before the first round."""
        if self._saved is None:
            self._saved = self._load_state()

    def written_while_down(self) -> Dict[str, Tuple[str, str, Optional[str]]]:
        """path -> (source, job, rank) of the saved discovered files that are still the same file
        (device and inode) and grew since the offsets were saved: lines a job wrote while the
        daemon was down (a rank's OOM before its elastic agent restarted the group into a new
        attempt's folder, or before the job ended). Read at the first round only."""
        self.load_saved()
        out: Dict[str, Tuple[str, str, Optional[str]]] = {}
        for path, v in (self._saved or {}).items():
            job, rank = v.get("job"), v.get("rank")
            if not isinstance(job, str) or not isinstance(v.get("source"), str):
                continue
            if self._same_and_grown(path, v):
                out[path] = (v["source"], job, rank if isinstance(rank, str) else None)
        return out

    @staticmethod
    def _same_and_grown(path: str, saved: dict) -> bool:
        """The saved file still (a regular file, not through a link; same device, inode and first
        bytes: an inode is reused by a file made after a delete) and longer than its offset."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            return (stat.S_ISREG(st.st_mode) and _is_saved_file(fd, st, saved)
                    and st.st_size > int(saved.get("offset") or 0))
        except OSError:
            return False
        finally:
            os.close(fd)

    # -- configuration ------------------------------------------------------------------------
    def set_sources(self, sources: Sequence[SourceSpec]) -> None:
        """Adopt a reloaded source list, keeping offsets and counters of what stays."""
        self.sources = list(sources)
        self._rank_res = {s.name: re.compile(s.rank_pattern, re.IGNORECASE) if s.rank_pattern else None
                          for s in self.sources}
        for s in self.sources:
            self.stats.setdefault(s.name, SourceStats())
        names = {s.name for s in self.sources}
        for name in list(self.stats):
            if name not in names:
                del self.stats[name]

    # -- persisted offsets --------------------------------------------------------------------
    def _load_state(self) -> Dict[str, dict]:
        if not self.state_path:
            return {}
        try:
            doc = statefiles.load_json(self.state_path)  # a FIFO or /dev/zero here is damage, not a hang
            if not isinstance(doc, dict) or (doc.get("version") == STATE_VERSION and not _valid_files(doc.get("files"))):
                raise ValueError("not an offsets document")
            files = doc.get("files", {}) if doc.get("version") == STATE_VERSION else {}
            extra = doc.get("extra") if doc.get("version") == STATE_VERSION else None
            self.saved_extra = extra if isinstance(extra, dict) else {}
            at = doc.get("saved_at")
            self._saved_at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None
            return {p: v for p, v in files.items() if isinstance(v, dict)}
        except FileNotFoundError:
            return {}
        except ValueError as exc:  # damaged (JSON, UTF-8 or shape): set aside, reported, start fresh
            statefiles.quarantine(self.state_path, f"log offsets unreadable: {str(exc)[:200]}")
            return {}
        except OSError as exc:
            log.warning("log offsets in %s unreadable (%s); files will be read from their end", self.state_path, exc)
            return {}

    def save_state(self, sync: Optional[bool] = None) -> None:
        """Write the offsets atomically; raises OSError. Written after every round that read
        something (a daemon killed at any moment loses no position: the page cache keeps the
        file), fsynced at most every SYNC_SECONDS and at close (a machine crash loses at most that
        much: an fsync per round was most of a quiet log round's CPU)."""
        if not self.state_path or self._saved is None:
            return  # nothing read yet: the file holds what the last tailer saved, which stays
        files = {p: _record(f) for p, f in self.files.items()}
        doc = {"version": STATE_VERSION, "files": files, "saved_at": time.time()}
        if self.extra_state is not None:
            doc["extra"] = self.extra_state()
        now = time.monotonic()
        if sync is None:
            sync = self._synced_at is None or now - self._synced_at >= SYNC_SECONDS
        statefiles.write_json(self.state_path, doc, sync=sync)
        if sync:
            self._synced_at = now

    def save_round(self) -> None:
        """Save after a round; a failure is reported once per episode and never stops reading."""
        try:
            self.save_state()
            self.retired.save()
        except OSError as exc:
            self.state_save_errors_total += 1
            self._save.failed(exc)
            return
        self._save.saved()

    @property
    def state_error(self) -> Optional[str]:
        """Why the last offsets save failed (None once a save succeeds again)."""
        return self._save.error

    # -- the round ----------------------------------------------------------------------------
    def expand(self) -> Dict[str, SourceSpec]:
        """path -> source for every existing regular file matched now (first source wins).

        A configured directory that exists but cannot be listed (or searched) is recorded in
        `errors`: glob would silently match nothing there."""
        out: Dict[str, SourceSpec] = {}
        odd: Dict[str, str] = {}
        for src in self.sources:
            for pattern in src.paths:
                pattern = os.path.expanduser(pattern)
                self._check_dir(pattern, src.name)
                matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
                for p in matches:
                    if p not in out and os.path.isfile(p):
                        out[p] = src
                    elif os.path.lexists(p) and not os.path.isdir(p):
                        odd.setdefault(p, src.name)
        # A FIFO, a device (a link to /dev/zero) or a dangling link where a log should be is not
        # read (a FIFO's reader would block, /dev/zero never ends), and said, not skipped in silence.
        for p, source in odd.items():
            msg = f"{p}: not a regular file (a FIFO, a device or a dangling link); not read"
            if p not in out and self.errors.get(p, msg) == msg:  # a loop's own error (ELOOP) stays
                self._set_error(p, source, msg)
        self._odd = set(odd)
        return out

    def _check_dir(self, pattern: str, source: str) -> None:
        where = _error_key(pattern)
        try:
            if glob.has_magic(pattern):
                with os.scandir(where):
                    pass
            else:
                os.stat(pattern)
        except (FileNotFoundError, NotADirectoryError):
            self._clear_error(where)
        except OSError as exc:
            self._set_error(where, source, f"{where}: {exc.strerror or exc}")
        else:
            self._clear_error(where)

    def _set_error(self, key: str, source: str, msg: str) -> None:
        if self.errors.get(key) != msg:
            log.warning("cannot read log path %s", msg)
            if source in self.stats:
                self.stats[source].read_errors_total += 1
        self.errors[key] = msg
        self.error_sources[key] = source

    def _clear_error(self, key: str) -> None:
        if self.errors.pop(key, None) is not None:
            log.info("log path %s is readable again", key)
        self.error_sources.pop(key, None)

    def poll(self, consume: Consumer, now: float, save: bool = True) -> int:
        """Read what is new in every followed file (bounded); returns the bytes read. `save`
        False: the caller saves (`save_round`) once what it derived from the lines is in its
        `extra_state`, so the offsets never get ahead of it on disk."""
        first = not self._polled
        self._polled = True
        self.load_saved()
        budget = self.round_bytes
        self._limit = self.max_open if self.max_open is not None else fdbudget.log_file_budget()
        for st in self.stats.values():
            st.lines_round = 0
        current = self.expand()
        # 1. rotated or vanished paths go to `draining`; 2. old handles are read first (their
        # lines are older) and closed once quiet and no process writes them; 3. every current path.
        self._rotate_away(current, now)
        self._keep_written(self.draining, now, self.drain_grace)
        for f in list(self.draining):
            budget -= self._drain(f, consume, now, budget)
        for p, src in current.items():
            if budget <= 0:
                self._mark_behind(p, now)
                continue
            try:
                budget -= self._follow(p, src, consume, now, first, budget)
                self._clear_error(p)
            except OSError as exc:
                self._set_error(p, src.name, f"{p}: {exc.strerror or exc}")
        dirs = {_error_key(os.path.expanduser(p)) for src in self.sources for p in src.paths}
        for key in [k for k in self.errors if k not in current and k not in dirs and k not in self._odd]:
            self._clear_error(key)  # an unreadable file that is gone, or a source no longer configured
        self._close_idle(now)
        self._update_gauges(now)
        if save:
            self.save_round()
        return self.round_bytes - budget

    def _rotate_away(self, current: Dict[str, SourceSpec], now: float) -> None:
        """Followed paths that vanished or now name another file: keep the old handle draining."""
        for p in list(self.files):
            f = self.files[p]
            if p in current:
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) == (f.dev, f.ino):
                    continue
                self._rotated(f.source)
            else:
                self._gone.add(p)
                self.retired.retire(p, _record(f))
            del self.files[p]
            if f.fh is not None:
                f.drain_since = now
                self.draining.append(f)

    def _drain(self, f: Followed, consume: Consumer, now: float, budget: int) -> int:
        """Read a rotated-away file; close it once it has been quiet for `drain_grace`."""
        try:
            used = self._read(f, consume, now, budget, final=False)
            quiet = now - max(f.last_change, f.drain_since or now, f.written_at) >= self.drain_grace
            if f.fh is not None and quiet and f.behind_since is None:
                used += self._read(f, consume, now, budget - used, final=True)  # flush a partial line, close
        except OSError as exc:
            log.warning("reading rotated log file %s failed: %s", f.path, exc.strerror or exc)
            used = 0
            self._close_fh(f)
        if f.fh is None:
            self.draining.remove(f)
            rec = self.retired.records.get(f.path)
            if rec is not None and (rec["dev"], rec["ino"]) == (f.dev, f.ino):
                self.retired.retire(f.path, _record(f))  # read to its end since it retired
        return used

    def _adopt(self, p: str, st: os.stat_result) -> Optional[Followed]:
        """A rotated-away file that reappears under a matched name continues at its offset."""
        for f in self.draining:
            if (f.dev, f.ino) == (st.st_dev, st.st_ino):
                self.draining.remove(f)
                f.path, f.drain_since = p, None
                return f
        return None

    def _mark_behind(self, p: str, now: float) -> None:
        f = self.files.get(p)
        if f is not None and f.behind_since is None:
            f.behind_since = now

    def _new(self, p: str, src: SourceSpec, st: os.stat_result, offset: int, line: Optional[int]) -> Followed:
        rank = None
        job = None
        rre = self._rank_res.get(src.name)
        labelled = {lp: (lj, lr) for lp, lj, lr in src.path_labels}.get(p) if src.path_labels else None
        if labelled is not None:
            job, rank = labelled
        elif rre is not None:
            found = rre.findall(p)
            if found:
                last = found[-1]
                rank = (last if isinstance(last, str) else next((g for g in last if g), None)) or None
        uid = dict(src.path_owners).get(p) if src.path_owners else None
        f = Followed(source=src.name, path=p, rank=rank, dev=st.st_dev, ino=st.st_ino, offset=offset,
                     stream=StreamState(line_no=line), last_change=0.0, job=job, uid=uid)
        return f

    def _open(self, f: Followed) -> Tuple[int, os.stat_result]:
        """Open through `rankfiles` (no link, no FIFO, the rank's user's file only)."""
        fd = open_rank_file(f.path, f.uid)
        f.fh = fd
        self.held += 1
        return fd, os.fstat(fd)

    def _close_fh(self, f: Followed) -> None:
        if f.fh is not None:
            try:
                os.close(f.fh)
            except OSError:
                pass
            f.fh = None
            self.held -= 1

    def _keep_written(self, files: Sequence[Followed], now: float, quiet_for: float) -> None:
        """Of the open files quiet for `quiet_for` (due to be closed), those a process still holds
        open for writing stay open for another `quiet_for`: `python train.py > train.log` keeps
        writing to the file logrotate renamed or deleted, after an eval or a checkpoint of any
        length. One scan of /proc for all of them (only when some are due)."""
        due = [f for f in files if f.fh is not None and f.behind_since is None
               and now - max(f.last_change, f.drain_since or 0.0, f.written_at) >= quiet_for]
        if not due:
            return
        links: Dict[str, Optional[openfiles.Ident]] = {}
        named: List[Tuple[Followed, str]] = []
        uids: Optional[set] = {0}
        for f in due:
            link, ident = openfiles.own_link(f.fh)  # type: ignore[arg-type]
            if link is None:
                continue
            links[link] = ident
            named.append((f, link))
            try:
                st = os.fstat(f.fh)  # type: ignore[arg-type]
            except OSError:
                continue
            if st.st_mode & 0o022:  # group or others may write it: any user's process may
                uids = None
            elif uids is not None:
                uids.add(st.st_uid)
        found = openfiles.writers(links, uids)
        for f, link in named:
            if found.get(link):
                f.written_at = now

    def _rotated(self, src: str) -> None:
        if src in self.stats:
            self.stats[src].rotations_total += 1

    def _follow(self, p: str, src: SourceSpec, consume: Consumer, now: float, first: bool, budget: int) -> int:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            return 0
        f = self.files.get(p)
        if f is not None and (st.st_dev, st.st_ino) != (f.dev, f.ino):
            # Rotated since the round began: the old handle drains from the next round on.
            del self.files[p]
            self._rotated(src.name)
            if f.fh is not None:
                f.drain_since = now
                self.draining.append(f)
            f = self._new(p, src, st, 0, 0)
            self.files[p] = f
        if f is None:
            f = self._adopt(p, st) or self._start(p, src, st, first)
            self.files[p] = f
        elif st.st_size < f.offset:
            self._restart(f, src.name)  # copytruncate
        fd = f.fh
        if fd is None:
            if f.polled and st.st_size == f.offset and st.st_mtime_ns == f.mtime_ns:
                return 0  # read by polling and unchanged: not even opened
            fd, fst = self._open(f)
            if (fst.st_dev, fst.st_ino) != (f.dev, f.ino):  # replaced between stat and open
                self._close_fh(f)
                return 0
        if f.fp_len and st.st_size >= f.fp_len and _fingerprint(fd, f.fp_len) != f.fp:
            self._restart(f, src.name)  # same inode, other content: inode reuse
        if f.fp_len < FINGERPRINT_BYTES and st.st_size > f.fp_len:
            f.fp_len = min(FINGERPRINT_BYTES, st.st_size)
            f.fp = _fingerprint(fd, f.fp_len)
        used = self._read(f, consume, now, budget, final=False)
        f.mtime_ns = st.st_mtime_ns
        if f.fh is not None and self.held > self._limit and f.behind_since is None:
            self._close_fh(f)  # beyond the budget: read by polling
            f.polled = True
            self._say_polling()
        elif f.fh is not None:
            f.polled = False
        return used

    def _say_polling(self) -> None:
        if not self._polling_said:
            self._polling_said = True
            soft, _ = fdbudget.nofile_limits()
            log.warning("more log files are followed than %d descriptors allow (open-files limit %d): the files "
                        "beyond are read by polling, each opened, read and closed every round "
                        "(npu_watchdog_log_files_polled); raise LimitNOFILE to keep them all open",
                        self._limit, soft)

    def _restart(self, f: Followed, src: str) -> None:
        self._rotated(src)
        f.offset = 0
        f.stream = StreamState(line_no=0)
        f.fp, f.fp_len = "", 0
        f.tail_fp, f.tail_len = "", 0

    def _start(self, p: str, src: SourceSpec, st: os.stat_result, first: bool) -> Followed:
        """Where a file not followed until now is read from: its saved offset (a restart), where
        reading stopped when it was last followed (a relaunch appending to it), its end (first
        seen at daemon start, or last written before its job started), else its beginning."""
        saved = self._saved.pop(p, None) if self._saved else None
        if saved is not None:
            f = self._new(p, src, st, 0, 0)
            if not self._resume(f, saved, restart=True):
                self._rotated(src.name)  # replaced or truncated while we were down: read it all
            return f
        retired = self.retired.take(p)
        if retired is not None:
            f = self._new(p, src, st, 0, 0)
            if self._resume(f, retired, restart=False):
                self._gone.discard(p)
                return f
            self._close_fh(f)
        start_at = dict(src.path_from).get(p, 0) if src.path_from else 0
        if (first and src.start == "end") or 0 < start_at <= st.st_size:
            f = self._new(p, src, st, 0, None)
            fd, fst = self._open(f)
            f.offset = self._end_of_last_line(fd, min(fst.st_size, start_at or fst.st_size))
            self._gone.discard(p)
            return f
        if p in self._gone:
            self._gone.discard(p)
            self._rotated(src.name)  # deleted and re-created
        return self._new(p, src, st, 0, 0)

    def _resume(self, f: Followed, saved: dict, restart: bool) -> bool:
        """Continue `f` at a saved position if it is still that file (same identity, not shorter,
        not written again from its start); `restart`: saved before this daemon started."""
        fd, fst = self._open(f)
        offset = int(saved.get("offset") or 0)
        if not _is_saved_file(fd, fst, saved) or offset > fst.st_size:
            return False
        if restart and self._rewritten(f, saved, offset):
            return False
        if not restart and (not self._same_tail(f, saved, offset) or _truncating_writer(f.path, saved.get("at"))):
            return False
        f.offset = offset
        f.fp, f.fp_len = str(saved.get("fp") or ""), int(saved.get("fp_len") or 0)
        f.tail_fp, f.tail_len = str(saved.get("tail_fp") or ""), int(saved.get("tail_len") or 0)
        line = saved.get("line")
        f.stream = StreamState(line_no=int(line) if isinstance(line, int) else None)
        return True

    @staticmethod
    def _same_tail(f: Followed, saved: dict, offset: int) -> bool:
        """The bytes just before the saved offset are still those read there (true where none
        were noted: a file taken up at its end and not read since)."""
        tail_len = int(saved.get("tail_len") or 0)
        if not tail_len or offset < tail_len or f.fh is None:
            return True
        return _digest(os.pread(f.fh, tail_len, offset - tail_len)) == saved.get("tail_fp")

    def _rewritten(self, f: Followed, saved: dict, offset: int) -> bool:
        """Whether a saved file with the same inode and first bytes was written again from its
        start while the daemon was down (`> train.log` of a relaunched job; torchrun's banner makes
        the first bytes alike): the bytes just before the saved offset differ, or a process that
        started after the offsets were saved writes it without O_APPEND (so from its start)."""
        if not self._same_tail(f, saved, offset):
            return True
        if self._saved_at is None or f.fh is None:
            return False
        if self._relaunched is None:
            # One scan for every saved file: only processes started since the save are looked at.
            links: Dict[str, Optional[openfiles.Ident]] = {os.path.realpath(p): None for p in self._saved or ()}
            links[os.path.realpath(f.path)] = None
            self._relaunched = openfiles.writers(links, None, started_after=self._saved_at)
        return any(not w.appends for w in self._relaunched.get(os.path.realpath(f.path), ()))

    @staticmethod
    def _end_of_last_line(fd: int, size: int) -> int:
        """Offset just after the last newline (so a half-written line is read once complete)."""
        tail = min(size, 65536)
        data = os.pread(fd, tail, size - tail) if tail else b""
        nl = data.rfind(b"\n")
        return size - tail + nl + 1 if nl >= 0 else size

    def _read(self, f: Followed, consume: Consumer, now: float, budget: int, final: bool) -> int:
        """Read complete lines from f's offset, at most `budget` bytes; `final` flushes the tail."""
        if f.fh is None:
            return 0
        size = check_fd(f.fh, f.path, f.uid).st_size
        used = 0
        stats = self.stats.get(f.source)
        held = not final and self._still_partial(f, size)
        while f.offset < size and used < budget and not held:
            want = min(self.slice_bytes, budget - used, size - f.offset)
            data = os.pread(f.fh, want, f.offset)
            if not data:
                break
            if len(data) >= HOLE_PROBE and not data[:HOLE_PROBE].strip(b"\0") and _skip_hole(f, size):
                continue  # a sparse region skipped: read on from the data after it
            nl = data.rfind(b"\n")
            if nl >= 0:
                stop = nl + 1
            elif len(data) >= self.slice_bytes or final:
                stop = len(data)  # an over-long line is cut; a drained file's last line is flushed
            else:
                held = f.offset + len(data) >= size  # partial last line: wait for its newline
                break
            fed = f.stream.lines_fed
            consume(f, data, stop)
            f.offset += stop
            self._note_tail(f, data, stop)
            used += stop
            f.last_change = now
            if stats is not None:
                stats.bytes_total += stop
                n = f.stream.lines_fed - fed or data.count(b"\n", 0, stop) or 1
                stats.lines_total += n
                stats.lines_round += n
                stats.last_line_at = now
            if stop < len(data) and f.offset + (len(data) - stop) >= size:
                held = True
                break
        if held:  # what lies from the offset to the end holds no newline: the next round reads on from the end
            f.no_newline = (f.offset, size)
        behind = f.offset < size and not held
        if behind:
            if f.behind_since is None:
                f.behind_since = now
        else:
            f.behind_since = None
        if final and f.offset >= size:
            self._close_fh(f)
        return used

    def _still_partial(self, f: Followed, size: int) -> bool:
        """Whether the partial last line held at the last read is still one, reading only what
        was written after it. Why: a progress bar redrawn with `\r` and no newline grows one
        line for hours; the whole of it (up to a slice) was read again every round to find no
        newline, at every round of an unchanged file too. A line that reaches a slice is read
        (and cut) as before; a file that shrank or moved its offset is read as before."""
        start, end = f.no_newline
        if f.fh is None or start != f.offset or not start < end <= size or size - start >= self.slice_bytes:
            return False
        if end < size:
            new = os.pread(f.fh, size - end, end)
            if len(new) != size - end or b"\n" in new:
                return False
        return True

    def _note_tail(self, f: Followed, data: bytes, stop: int) -> None:
        """Remember the hash of the bytes just before the new offset (see `_rewritten`)."""
        n = min(FINGERPRINT_BYTES, f.offset)
        block = data[stop - n:stop] if stop >= n else (os.pread(f.fh, n, f.offset - n) if f.fh is not None else b"")
        if len(block) == n:
            f.tail_fp, f.tail_len = _digest(block), n

    def _close_idle(self, now: float) -> None:
        """Close files idle for `idle_close`, unless a process still holds them for writing: a
        quiet file that is then rotated or deleted could no longer be followed."""
        idle = [f for f in self.files.values() if f.fh is not None and f.last_change
                and now - max(f.last_change, f.written_at) > self.idle_close and f.behind_since is None]
        self._keep_written(idle, now, self.idle_close)
        for f in idle:
            if f.written_at != now:
                self._close_fh(f)

    def _update_gauges(self, now: float) -> None:
        for name, st in self.stats.items():
            files = [f for f in self.files.values() if f.source == name]
            st.files_followed = len(files)
            st.files_polled = sum(1 for f in files if f.polled and f.fh is None)
            lags = [now - f.behind_since for f in files + [d for d in self.draining if d.source == name]
                    if f.behind_since is not None]
            st.read_lag_seconds = max(lags) if lags else 0.0

    def close(self) -> None:
        """Write the offsets (nothing before the first round: see `save_state`) and close every file."""
        try:
            self.save_state(sync=True)
            self.retired.save()
        except OSError:
            pass
        for f in list(self.files.values()) + self.draining:
            self._close_fh(f)
        self.draining = []

"""The heartbeat probe: reads one heartbeat file per rank and derives per-rank progress.

Files are read while trainers rewrite them. A read that catches a file empty or half-written is
retried once at once and otherwise reported on the reading (`error`), with the last good values
carried forward, so detectors never mistake a torn read for a stale or regressed heartbeat; only
an error that persists (`error_since`) becomes a finding.

The probe is where progress over time is derived, because it sees every read, not just what the
bounded history keeps: `step_changed_at` (when the step last advanced, in the heartbeat's clock)
and the largest gap between step advances while in `train`, for learned thresholds.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

from watchdog.host import clock, turns
from watchdog.parse import flight_recorder as fr
from watchdog.config.sections.common import ProbeSection
from watchdog.config.sections.heartbeat import HeartbeatProbeConfig
from watchdog.parse.heartbeat_format import HeartbeatFormatError, ParsedBeat, parse_heartbeat
from watchdog.observations import HeartbeatObservation, HeartbeatReading
from watchdog.probes.base import Collected, Probe, ProbeContext, ProbeError
from watchdog.host.rankfiles import open_rank_file
from watchdog.service.statefiles import SaveEpisode, read_json, write_json

log = logging.getLogger(__name__)

#: JSON-lines files grow; only their tail is read.
TAIL_BYTES = 64 * 1024
#: Each rank's last step and when it changed, kept next to the log offsets (see statefile).
PROGRESS_FILE = "heartbeat-progress.json"
PROGRESS_VERSION = 1
#: The progress file is rewritten (fsynced) at most this often while steps advance, and at once
#: when a file comes or goes, and at shutdown. Why: steps advance every round, and an fsync per
#: round was a third of the probe's CPU; after a crash the last progress is then at most this
#: much older than it was (a stall is paged that much later, once, after a crash only).
PROGRESS_SAVE_SECONDS = 60.0
RETRY_DELAY = 0.05
#: Flight recorder records carried on each reading (shown in /api/status).
FLIGHT_TAIL = 5
_DIGITS = re.compile(r"([0-9]{1,9})", re.ASCII)


def rank_from_path(path: str) -> Optional[int]:
    """The last number in the file name (rank3.json, hb-07.json, heartbeat_rank_12), if any."""
    nums = _DIGITS.findall(os.path.basename(path))
    return int(nums[-1]) if nums else None


@dataclass
class _FileState:
    last: Optional[HeartbeatReading] = None
    seen_json: bool = False
    last_step: Optional[int] = None
    step_changed_at: Optional[float] = None
    errors_total: int = 0
    error_since: Optional[float] = None
    train_since: Optional[float] = None
    max_step_gap: Optional[float] = None
    step_gaps: int = 0
    last_phase: Optional[str] = None
    gap_start: Optional[float] = None
    flight_error: Optional[str] = None
    #: The last raw (writer's wall clock) beat time and mtime and their times on the daemon's
    #: clock, and when the file was last read: ages are judged on the daemon's clock, so a
    #: wall-clock step neither ages a healthy rank nor freshens a dead one (see
    #: watchdog.host.clock.steady_stamp).
    raw_beat: Optional[float] = None
    beat_at: Optional[float] = None
    raw_mtime: Optional[float] = None
    mtime_at: Optional[float] = None
    read_at: Optional[float] = None


def read_file(path: str, uid: Optional[int] = None) -> Tuple[bytes, float, int]:
    """(tail bytes, mtime, size) read from one open file, so mtime and content belong together.
    Opened through `rankfiles` (no link followed, regular files of the rank's user `uid` only)."""
    fd = open_rank_file(path, uid)
    try:
        st = os.fstat(fd)
        start = max(0, st.st_size - TAIL_BYTES)
        os.lseek(fd, start, os.SEEK_SET)
        chunks = []
        remaining = st.st_size - start
        while remaining > 0:
            b = os.read(fd, min(remaining, 65536))
            if not b:
                break
            chunks.append(b)
            remaining -= len(b)
        data = b"".join(chunks)
        if start > 0:
            nl = data.find(b"\n")
            data = data[nl + 1:] if nl >= 0 else b""
        return data, st.st_mtime, st.st_size
    finally:
        os.close(fd)


def read_ring_tail(path: str, n: int = FLIGHT_TAIL, uid: Optional[int] = None) -> Tuple[Tuple[dict, ...], Optional[str]]:
    """(newest records, error) of a flight recorder; ((), None) when the rank has none.

    Reads the header and only the slots that can hold the newest `n` records (a few hundred
    bytes), so a round costs the same whatever the ring's capacity.
    """
    try:
        fd = open_rank_file(path, uid)
    except FileNotFoundError:
        return (), None
    except OSError as exc:
        return (), f"cannot read {os.path.basename(path)}: {exc.strerror or exc}"
    try:
        header = fr.parse_header(os.pread(fd, fr.HEADER.size, 0))
        chunks = {seq: os.pread(fd, header.record_size, off) for seq, off in fr.tail_slots(header, n)}
        return tuple(fr.tail_records(header, chunks, n)), None
    except fr.RingFormatError as exc:
        return (), f"{os.path.basename(path)}: {exc}"
    except OSError as exc:
        return (), f"cannot read {os.path.basename(path)}: {exc.strerror or exc}"
    finally:
        os.close(fd)


class HeartbeatProbe(Probe):
    name = "heartbeat"

    def __init__(self, cfg: HeartbeatProbeConfig, state_dir: Optional[str] = None):
        self.cfg = cfg
        self.interval = cfg.interval
        self.timeout = cfg.timeout
        self._files: Dict[str, _FileState] = {}
        self._state_path = os.path.join(state_dir, PROGRESS_FILE) if state_dir else None
        self._saved: Dict[str, Any] = {}
        self._saved_at: Optional[float] = None
        #: A failing progress save, said once per episode (the state_unwritable alert covers the
        #: folder itself).
        self._save = SaveEpisode("heartbeat progress", self._state_path or "", log)
        self._restore_progress()

    # -- last progress across restarts ----------------------------------------------------------
    def _progress_doc(self) -> Dict[str, Any]:
        return {p: {"step": st.last_step, "phase": st.last_phase, "at": st.step_changed_at}
                for p, st in self._files.items() if st.last_step is not None and st.step_changed_at is not None}

    def _restore_progress(self) -> None:
        """Each rank's last step and when it last changed, from before a restart: a rank still at
        that step has not progressed since then (not since the daemon came back)."""
        if self._state_path is None:
            return
        for path, row in read_json(self._state_path, PROGRESS_VERSION).items():
            try:
                st = _FileState(last_step=int(row["step"]), step_changed_at=float(row["at"]),
                                last_phase=row.get("phase") if isinstance(row.get("phase"), str) else None)
            except (KeyError, TypeError, ValueError):
                continue
            self._files[str(path)] = st
        self._saved = self._progress_doc()

    def _save_progress(self, force: bool = False) -> None:
        if self._state_path is None:
            return
        doc = self._progress_doc()
        if doc == self._saved:
            return
        now = time.monotonic()
        if not force and self._saved_at is not None and now - self._saved_at < PROGRESS_SAVE_SECONDS \
                and doc.keys() == self._saved.keys():
            return
        try:
            write_json(self._state_path, {"version": PROGRESS_VERSION, "data": doc})
            self._saved, self._saved_at = doc, now
        except OSError as exc:
            self._save.failed(exc)
            return
        self._save.saved()

    def _paths(self) -> List[str]:
        found: List[str] = []
        for pattern in self.cfg.paths:
            if glob.has_magic(pattern):
                # A broad glob (`hb/*`) also matches the flight recorders next to the files.
                found.extend(p for p in sorted(glob.glob(pattern)) if not p.endswith(fr.SUFFIX))
            else:
                found.append(pattern)
        # Files seen before stay watched after they vanish (a deleted heartbeat is not a healthy one).
        for p in self._files:
            if p not in found:
                found.append(p)
        out, seen = [], set()
        for p in found:
            if p not in seen:
                seen.add(p)
                out.append(p)
        return out

    def _uid_of(self, path: str) -> Optional[int]:
        """The user whose file this must be: unknown (None) for paths from the config."""
        return None

    def _parse(self, path: str, st: _FileState) -> Tuple[Optional[ParsedBeat], float, Optional[str]]:
        """(parsed or None for an mtime heartbeat, mtime, error). Raises FileNotFoundError."""
        error = None
        mtime = 0.0
        for attempt in range(2):
            data, mtime, size = read_file(path, self._uid_of(path))
            if self.cfg.format == "mtime":
                return None, mtime, None
            if size == 0 and self.cfg.format == "auto" and not st.seen_json:
                return None, mtime, None  # a `touch` heartbeat
            try:
                return parse_heartbeat(data), mtime, None
            except HeartbeatFormatError as exc:
                error = str(exc)
            if attempt == 0:
                turns.pause(RETRY_DELAY)  # caught mid-rewrite: look once more before reporting
        return None, mtime, error

    def _read_one(self, path: str, order: int, now: float) -> HeartbeatReading:
        st = self._files.setdefault(path, _FileState())
        fallback_rank = rank_from_path(path)
        if fallback_rank is None:
            fallback_rank = order
        prev_read, st.read_at = st.read_at, now
        try:
            parsed, mtime, error = self._parse(path, st)
            if mtime:
                st.mtime_at = clock.steady_stamp(mtime, st.raw_mtime, st.mtime_at, prev_read, now)
                st.raw_mtime, mtime = mtime, st.mtime_at
        except FileNotFoundError:
            if st.last is None:
                return HeartbeatReading(path=path, rank=fallback_rank, exists=False)
            return replace(st.last, exists=False, error=None, error_since=None,
                           read_errors_total=st.errors_total)
        except OSError as exc:
            parsed, mtime, error = None, 0.0, f"cannot read: {exc.strerror or exc}"

        if error is not None:
            st.errors_total += 1
            if st.error_since is None:
                st.error_since = now
            base = st.last or HeartbeatReading(path=path, rank=fallback_rank, exists=True)
            return replace(base, exists=True, mtime=mtime or base.mtime, error=error,
                           error_since=st.error_since, read_errors_total=st.errors_total)
        st.error_since = None

        if parsed is None:
            reading = HeartbeatReading(path=path, rank=fallback_rank, exists=True, mtime=mtime,
                                       beat_time=mtime, format="mtime", read_errors_total=st.errors_total)
            st.last = reading
            return reading

        st.seen_json = True
        beat_time = mtime
        if parsed.time is not None:
            st.beat_at = clock.steady_stamp(parsed.time, st.raw_beat, st.beat_at, prev_read, now)
            st.raw_beat, beat_time = parsed.time, st.beat_at
        self._track_progress(st, parsed, beat_time)
        fields = dict(parsed.extra)
        flight_tail, flight_error = read_ring_tail(fr.ring_path(path), uid=self._uid_of(path))
        if flight_error != st.flight_error:  # logged once per change, not every round
            if flight_error:
                log.warning("flight recorder of %s unreadable: %s", path, flight_error)
            st.flight_error = flight_error
        reading = HeartbeatReading(
            path=path, rank=parsed.rank if parsed.rank is not None else fallback_rank, exists=True,
            mtime=mtime, beat_time=beat_time, step=parsed.step, phase=parsed.phase, loss=parsed.loss,
            grad_norm=parsed.grad_norm, loss_scale=parsed.loss_scale, throughput=parsed.throughput,
            fields=fields, format="json", throughput_unit=parsed.throughput_unit, pid=parsed.pid,
            step_changed_at=st.step_changed_at, read_errors_total=st.errors_total,
            train_since=st.train_since, max_step_gap=st.max_step_gap, step_gaps=st.step_gaps,
            flight_tail=flight_tail, flight_error=flight_error,
        )
        st.last = reading
        return reading

    @staticmethod
    def _track_progress(st: _FileState, parsed: ParsedBeat, beat_time: float) -> None:
        """Update the last-progress time and the learned-gap bookkeeping from one good read.

        Progress is the step advancing or the phase changing (entering or leaving a checkpoint
        is progress too). Gaps for learning are measured only between two progress events inside
        `train`, so a 20-minute checkpoint never inflates the learned threshold.
        """
        step, phase = parsed.step, parsed.phase
        in_train = phase in (None, "train")
        if step is None:
            st.step_changed_at, st.last_step, st.gap_start = None, None, None
            st.last_phase = phase
            return
        restarted = st.last_step is None or step < st.last_step or (st.last_phase == "done" and phase != "done")
        if restarted:
            # First sighting, or the step went backwards / a finished job writes again: a
            # restart. Learning starts over, because the new run may have a different pace.
            st.step_changed_at = beat_time
            st.train_since = beat_time if in_train else None
            st.max_step_gap, st.step_gaps = None, 0
            st.gap_start = beat_time if in_train else None
        else:
            if step > st.last_step:
                if in_train and st.gap_start is not None:
                    gap = max(0.0, beat_time - st.gap_start)
                    st.max_step_gap = gap if st.max_step_gap is None else max(st.max_step_gap, gap)
                    st.step_gaps += 1
                st.step_changed_at = beat_time
            elif phase != st.last_phase:
                st.step_changed_at = beat_time
            if in_train:
                if st.gap_start is None or step > st.last_step or phase != st.last_phase:
                    st.gap_start = beat_time
                if st.train_since is None:
                    st.train_since = beat_time
            else:
                st.gap_start = None
        st.last_step = step
        st.last_phase = phase

    def collect(self) -> Collected:
        clock.CLOCK.check()  # a step since the last round bounds the stamps read in this one
        now = clock.now()
        paths = self._paths()
        readings = [self._read_one(p, i, now) for i, p in enumerate(paths)]
        self._save_progress()
        # A glob matching nothing yet is "not started": an empty observation, not an error.
        present = sum(1 for r in readings if r.exists)
        errors = sum(1 for r in readings if r.error)
        steps = [r.step for r in readings if r.step is not None]
        summary = f"{present}/{len(readings)} heartbeat files"
        if steps:
            summary += f", steps {min(steps)}..{max(steps)}"
        if errors:
            summary += f", {errors} unreadable this round"
        return Collected(HeartbeatObservation(readings=tuple(readings)), summary)

    def close(self) -> None:
        self._save_progress(force=True)

    def discard(self) -> None:
        """Nothing is open, and the progress file is the running probe's to write."""

    def reconfigure(self, new: Probe) -> bool:
        if type(new) is not type(self):  # discovery turned on or off: swapped (see LogsProbe)
            return False
        self.cfg, self.interval, self.timeout = new.cfg, new.interval, new.timeout
        return True


#: Position in the schedule (the registry orders probe modules by it).
ORDER = 20
#: Its config: `probes.heartbeat`; discovery feeds it.
SECTION: ProbeSection[HeartbeatProbeConfig] = ProbeSection("heartbeat", HeartbeatProbeConfig, feed=3)


def build(ctx: ProbeContext) -> List[Probe]:
    cfg = ctx.config.probes.heartbeat
    if not cfg.enabled:
        return []
    if ctx.config.fed_by_discovery("heartbeat"):
        d = ctx.config.discovery
        return [DiscoveredHeartbeatProbe(cfg, d.forget_after, ctx.discovery_feed(), d.interval, ctx.state_dir)]
    return [HeartbeatProbe(cfg, ctx.state_dir)]


class DiscoveredHeartbeatProbe(HeartbeatProbe):
    """Heartbeat files named by the ranks' NPU_WATCHDOG_HEARTBEAT, labelled with job and rank.

    A file stays watched while its job is discovered and `discovery.forget_after` beyond (a
    deleted heartbeat of a running job is not a healthy one), then it is forgotten.
    """

    def __init__(self, cfg: HeartbeatProbeConfig, forget_after: float, feed: Any, max_age: float = 10.0,
                 state_dir: Optional[str] = None):
        super().__init__(cfg, state_dir)
        self.forget_after, self.feed, self.max_age = forget_after, feed, max_age
        self._owners: Dict[str, Tuple[str, int, float]] = {}
        #: path -> the user of the rank that names it: the file must be that user's.
        self._uids: Dict[str, Optional[int]] = {}

    def _paths(self) -> List[str]:
        now = clock.now()
        try:
            found = self.feed.current(max_age=self.max_age)
        except Exception as exc:
            raise ProbeError(f"discovery failed: {type(exc).__name__}: {exc}") from None
        for job in found.jobs:
            for r in job.ranks:
                if r.heartbeat:
                    self._owners[r.heartbeat] = (job.name, r.rank, now)
                    self._uids[r.heartbeat] = r.uid
        for path in [p for p, (_, _, seen) in self._owners.items() if now - seen > self.forget_after]:
            del self._owners[path]
            self._uids.pop(path, None)
            self._files.pop(path, None)
        return sorted(self._owners)

    def _uid_of(self, path: str) -> Optional[int]:
        return self._uids.get(path)

    def collect(self) -> Collected:
        got = super().collect()
        readings = tuple(replace(r, job=self._owners[r.path][0], rank=self._owners[r.path][1])
                         if r.path in self._owners else r for r in got.value.readings)
        return Collected(HeartbeatObservation(readings=readings), got.summary)

    def reconfigure(self, new: Probe) -> bool:
        if not isinstance(new, DiscoveredHeartbeatProbe):
            return False
        self.cfg, self.interval, self.timeout, self.forget_after = new.cfg, new.interval, new.timeout, new.forget_after
        self.max_age = new.max_age
        return True

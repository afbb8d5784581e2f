"""A job's pace and goodput, folded round by round from its progress lines (no PROBE: the logs
summary owns one `PaceTrack` and feeds it; watchdog.summaries.logs).

Pace. A step time is what the trainer printed (phase-free: trainers stop their step timer around
checkpoints and evaluations), else the time between two rounds divided by the steps between them.
A gap longer than a pause (`pause_steps` step times, at least `pause_min`) is never a step time.
The recent pace is the median over `window`; the baseline the median of the closed windows'
medians over `baseline`, past the job's `warmup`, leaving out windows judged slow (a slowdown never
becomes the norm). Cost per round: a sort of at most the window's step times (bounded).

Goodput. Every second from the first round that saw the job is booked to one state: `starting`
(before its first progress line), `train`, `checkpoint`/`eval` (a pause a phase line opened or
closed), `restarting` (a pause after which the counter went back), `recompute` (steps done again
after a restart, up to the counter reached before it), `stalled` (any other pause). A gap is
booked when the next progress line closes it (then its cause is known: Megatron prints `validation
loss` only when the evaluation is over), so the counters only grow and never book a second twice;
the share trained (`goodput`) counts an open gap longer than a pause as not trained already, so it
falls while a job hangs. A heartbeat that declares `checkpoint` or `eval` names the open gap's
phase too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from watchdog.config.sections.pace import PaceConfig
from watchdog.core.state import Sample, StateView
from watchdog.observations import HeartbeatObservation, JobState, PaceLine, ProcessObservation
from watchdog.parse.pace import PaceMark

#: The goodput states, in the order status and messages list them.
STATES = ("train", "starting", "checkpoint", "eval", "stalled", "restarting", "recompute")
#: Step times kept for the recent window, at most (a trainer printing 20 steps a second).
MAX_RECENT = 512
#: Streams (log files) whose position is remembered, at most (every rank's log, over restarts).
MAX_STREAMS = 1024
#: Counters that are not step numbers: each line is one logging interval (HF's `epoch`, rounded to
#: two decimals, may repeat; HF logs on the main process only).
PER_LINE = ("hf",)
#: A line's own time stamp is trusted when it is at most this much older than the round that read
#: it (and not in the future): a trainer in another time zone than the daemon is off by hours.
STAMP_TRUST = 300.0
#: A counter that jumps further between two rounds gives no step time (MindSpore's next epoch:
#: watchdog.parse.pace counts epochs in units of this).
MAX_STEP_JUMP = 1_000_000


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


@dataclass(frozen=True)
class PaceVerdict:
    """What the pace is now: the detector, the metrics and status read it."""

    #: Median step time over the window, and the baseline (None until known).
    recent: Optional[float] = None
    baseline: Optional[float] = None
    steps: int = 0
    #: Since when the recent pace has been slow (None: not slow).
    slow_since: Optional[float] = None
    #: Newest time a step time was taken.
    last_at: Optional[float] = None
    warming_up: bool = True

    @property
    def ratio(self) -> Optional[float]:
        if self.recent is None or not self.baseline:
            return None
        return self.recent / self.baseline


@dataclass
class _Gap:
    """The open stretch since the last progress line."""

    since: float
    phase: Optional[str] = None


@dataclass
class PaceTrack:
    """One job's pace and goodput (one per job view, fed one probe round at a time); every
    window is bounded, so a round costs the same after a week as after a minute."""

    cfg: PaceConfig
    first_at: Optional[float] = None
    progress_first_at: Optional[float] = None
    counter: Optional[float] = None
    high_water: Optional[float] = None
    #: Newest time a progress line moved the counter (or gave a step time).
    progress_at: Optional[float] = None
    recent: Deque[Tuple[float, float]] = field(default_factory=lambda: deque(maxlen=MAX_RECENT))
    bucket: List[float] = field(default_factory=list)
    bucket_start: Optional[float] = None
    buckets: Deque[float] = field(default_factory=deque)
    slow_since: Optional[float] = None
    seconds: Dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in STATES})
    gap: Optional[_Gap] = None
    verdict: PaceVerdict = PaceVerdict()
    #: When the job ended (its last rank left): nothing is booked after it.
    ended_at: Optional[float] = None
    #: How late the daemon may see a job's end (a process round and its jitter): the quiet tail
    #: of a job that ended cleanly, up to pause + grace, is no part of the job.
    grace: float = 0.0
    #: Time of the newest round folded.
    last_round: Optional[float] = None
    #: Each stream's (file's) highest counter and when it was last read (`_back`, `_floor`); bounded.
    streams: Dict[str, Tuple[float, float]] = field(default_factory=dict)

    def configure(self, config: Any) -> None:
        """Adopt the config's thresholds (a reload); what was folded stays."""
        self.cfg = config.pace
        self.grace = float(config.probes.process.interval) + float(config.probes.jitter)

    # -- folding ------------------------------------------------------------------------------
    def add(self, at: float, lines: Sequence[PaceLine], declared: Optional[str] = None) -> None:
        """One round (its time `at`) and the pace lines it read, oldest first; `declared`: a
        pause phase (checkpoint, eval) a rank's heartbeat declares now."""
        if self.ended_at is not None:
            return
        if self.first_at is None:
            self.first_at = at
        moved, back = False, None
        fresh, per_line = 0, False
        phase_before: Optional[str] = None
        phase_after: Optional[str] = None
        times: List[float] = []
        newest = self.counter
        when = at
        floor = self._floor()
        seen: Dict[str, float] = {}
        for line in lines:
            m = line.mark
            if m.phase is not None:
                if moved:
                    phase_after = m.phase
                else:
                    phase_before = m.phase
                continue
            if m.kind in PER_LINE:
                fresh, per_line = fresh + 1, True  # one line per logging interval, rounded counter
            elif m.counter is not None:
                stream = line.stream or line.source
                seen[stream] = m.counter
                known = newest is not None and m.counter <= newest  # read before, or another rank's copy
                if known and self._back(stream, m.counter, floor):
                    back = m.counter if back is None else max(back, m.counter)
                self._note(stream, m.counter, at)
                if known:
                    continue
                newest = m.counter
            if m.step_seconds is not None and m.step_seconds > 0:
                times.append(m.step_seconds)
            moved, phase_after = True, None
            if m.stamp is not None and at - STAMP_TRUST <= m.stamp <= at + 1.0:
                when = m.stamp + 0.5  # printed within that second: its middle
        if phase_before is not None and self.progress_at is not None:
            if self.gap is None:
                self.gap = _Gap(self.progress_at)
            self.gap.phase = phase_before
        restart = back is not None and not moved and self.progress_at is not None \
            and at - self.progress_at > self.pause()
        if restart:
            self.streams.clear()  # every position starts again from the restart
            for stream, counter in seen.items():
                self._note(stream, counter, at)
            self._progress(at, back, times, restart=True)
        elif moved:
            # The newest line's own time where it has a trusted one: a round read late (a loaded
            # node) must not lengthen the gap it closes.
            self._progress(max(min(when, at), self.progress_at or when), newest, times,
                           steps=float(fresh) if per_line else None)
        if phase_after is not None:
            self.gap = _Gap(at, phase_after)
        self.open_gap(at, declared)

    def _floor(self) -> Optional[float]:
        """The lowest position of the streams that were printing at the last progress: a file with
        no position of its own (a new one after a restart) went back when it starts below it."""
        if self.counter is None:
            return None
        since = (self.progress_at or 0.0) - self.pause()
        active = [c for c, t in self.streams.values() if t >= since]
        return min(active + [self.counter])

    def _back(self, stream: str, counter: float, floor: Optional[float]) -> bool:
        """Below this stream's own highest counter when it has one (a stream that only catches up
        is not going back), else below the floor (a new file after a restart)."""
        own = self.streams.get(stream)
        if own is not None:
            return counter < own[0]
        return floor is not None and counter < floor

    def _note(self, stream: str, counter: float, at: float) -> None:
        """Remember a stream's highest counter (lowered only by a booked restart, which starts every
        position afresh); the stream read least recently goes past MAX_STREAMS."""
        old = self.streams.pop(stream, None)
        self.streams[stream] = (counter if old is None or counter > old[0] else old[0], at)
        if len(self.streams) > MAX_STREAMS:
            del self.streams[next(iter(self.streams))]

    def _progress(self, at: float, newest: Optional[float], printed: List[float], restart: bool = False,
                  steps: Optional[float] = None) -> None:
        """A round that moved the counter to `newest`; `steps`: how many steps it moved, when the
        counter is not a step number (HF's epoch: one log line per `logging_steps`)."""
        pause = self.pause()
        since = self.progress_at if self.progress_at is not None else self.first_at
        gap = max(at - since, 0.0) if since is not None else 0.0
        if self.progress_at is None:
            self.progress_first_at = at
            self._book("starting", gap)
        elif restart:
            self.high_water = max(self.counter or 0.0, self.high_water or 0.0)
            self._book("restarting", gap)
        elif gap > pause:
            self._book(self.gap.phase if self.gap is not None and self.gap.phase else "stalled", gap)
        else:
            redo = newest is not None and self.high_water is not None and newest <= self.high_water
            self._book("recompute" if redo else "train", gap)
            moved = steps if steps is not None else (newest - self.counter
                                                     if newest is not None and self.counter is not None else 0.0)
            if not printed and 0 < moved <= MAX_STEP_JUMP and gap > 0:
                printed = [gap / moved]
        if newest is not None:
            self.counter = newest
        self.progress_at = at
        self.gap = None
        for t in printed:
            self.recent.append((at, t))
        self._judge(at, printed)

    def _book(self, state: str, seconds: float) -> None:
        """Book a closed gap to `state`."""
        self.seconds[state] += max(seconds, 0.0)

    def open_gap(self, now: float, declared: Optional[str] = None) -> None:
        """Keep the open gap since the last progress line (booked when it closes); a phase the
        heartbeat declares now names it."""
        self.last_round = now
        if self.progress_at is None:
            return
        if self.gap is None:
            self.gap = _Gap(self.progress_at)
        if declared is not None:
            self.gap.phase = declared

    def pause(self) -> float:
        """A gap longer than this is not a step."""
        step = self.verdict.baseline or self.verdict.recent
        return max(self.cfg.pause_min, self.cfg.pause_steps * step) if step else self.cfg.pause_min

    def _judge(self, at: float, new_times: List[float]) -> None:
        cfg = self.cfg
        while self.recent and self.recent[0][0] < at - cfg.window and len(self.recent) > cfg.min_steps:
            self.recent.popleft()
        warming = self.progress_first_at is None or at < self.progress_first_at + cfg.warmup
        if not new_times:
            return
        recent = median([t for _, t in self.recent]) if len(self.recent) >= cfg.min_steps else None
        baseline = median(self.buckets) if len(self.buckets) >= 2 else None
        limit = 1.0 + cfg.slower_by_pct / 100.0
        if recent is not None and baseline:
            if recent >= baseline * limit:
                self.slow_since = self.slow_since or at
            elif recent < baseline * (1.0 + cfg.slower_by_pct / 200.0):
                self.slow_since = None
        if not warming:
            self._bucket(at, new_times)
        self.verdict = PaceVerdict(recent, baseline, len(self.recent), self.slow_since, at, warming)

    def _bucket(self, at: float, times: List[float]) -> None:
        cfg = self.cfg
        if self.bucket_start is None:
            self.bucket_start = at
        self.bucket.extend(times)
        if at - self.bucket_start >= cfg.window and len(self.bucket) >= cfg.min_steps:
            if self.slow_since is None:
                self.buckets.append(median(self.bucket))
                while len(self.buckets) > max(2, int(cfg.baseline // cfg.window)):
                    self.buckets.popleft()
            self.bucket, self.bucket_start = [], at

    def finish(self, at: float, clean: bool = True) -> None:
        """The job ended at `at`: its open gap is closed there (at a clean end, a quiet tail up to
        pause + grace is no part of the job), and nothing more is booked."""
        if self.ended_at is not None:
            return
        self.seconds, _ = self.goodput(at, clean)
        self.gap = None
        self.ended_at = at

    # -- questions ----------------------------------------------------------------------------
    def closed_gap(self, now: float, clean: bool) -> Optional[Tuple[str, float]]:
        """The open gap as the job's end at `now` closes it: (state, seconds), None for none."""
        if self.gap is None or self.progress_at is None:
            return None
        gap = max(now - self.gap.since, 0.0)
        if gap <= self.pause() or (clean and gap <= self.pause() + self.grace):
            return ("train", gap) if not clean else None
        return self.gap.phase or "stalled", gap

    def goodput(self, now: Optional[float] = None, clean: bool = False) -> Tuple[Dict[str, float], Optional[float]]:
        """Seconds per state (the closed gaps) and the share trained. With `now` (a job's end)
        the open gap is closed there and booked; without, an open gap longer than a pause counts
        against the share (not in the seconds: its state is not known yet)."""
        seconds = dict(self.seconds)
        total = sum(seconds.values())
        if self.ended_at is None and now is not None:
            closed = self.closed_gap(now, clean)
            if closed is not None:
                seconds[closed[0]] += closed[1]
                total += closed[1]
        elif self.ended_at is None and self.gap is not None and self.last_round is not None:
            gap = self.last_round - self.gap.since
            if gap > self.pause():
                total += gap
        return seconds, (seconds["train"] / total if total > 0 else None)


#: Heartbeat phases that pause the steps on purpose (booked as themselves, never as a stall).
PAUSE_PHASES = ("checkpoint", "eval")


def fold_round(track: PaceTrack, at: float, lines: Sequence[PaceLine], view: StateView) -> None:
    """One probe round into a job's track: its goodput starts when discovery first saw the job
    (not at the oldest round the history still holds) and stops when the job ended; a pause
    phase a rank's heartbeat declares names the open gap."""
    job = _job(view)
    if track.first_at is None:
        track.first_at = max(at, job.first_seen_at if job is not None else at)
    if job is not None and job.ended_at is not None and at >= job.ended_at:
        track.finish(job.ended_at, clean=job.end is None or not job.end.failure_line)
    track.add(at, lines, declared_phase(view, at))


def _job(view: StateView) -> Optional[JobState]:
    """The view's one discovered job, else None."""
    s = view.latest("process")
    if s is None or not isinstance(s.value, ProcessObservation) or len(s.value.jobs) != 1:
        return None
    return s.value.jobs[0]


def declared_phase(view: StateView, at: Optional[float] = None) -> Optional[str]:
    """The pause phase a rank's heartbeat declares at `at` (default: now; one rank writing a
    checkpoint while the others wait in a barrier is enough), else None."""
    s = sample_at(view, "heartbeat", at)
    if s is None or not isinstance(s.value, HeartbeatObservation):
        return None
    phases = {r.phase for r in s.value.readings}
    return next((p for p in PAUSE_PHASES if p in phases), None)


def sample_at(view: StateView, probe: str, at: Optional[float]) -> Optional[Sample]:
    """The newest sample of `probe` taken at or before `at` (None: `at` is now). A summary folded
    afresh (a job's summaries rebuilt from the history) replays old rounds: each must read the
    heartbeat of its own time, or an evaluation over by now would be booked as a stall."""
    latest = view.latest(probe)
    if latest is None or at is None or latest.time <= at:
        return latest
    hist = view.history(probe)
    lo, hi = 0, len(hist)
    while lo < hi:  # bisect on the sample times (bisect's `key` is 3.10+)
        mid = (lo + hi) // 2
        if hist[mid].time <= at:
            lo = mid + 1
        else:
            hi = mid
    return hist[lo - 1] if lo else None


def heartbeat_lines(at: float, obs: HeartbeatObservation) -> Tuple[PaceLine, ...]:
    """The heartbeat's pace for a job that prints no progress line (the hooks, a touch file with
    a step): the highest step any rank reports while training, as a counter."""
    steps = [r.step for r in obs.readings if r.exists and r.error is None and r.step is not None
             and r.phase in (None, "train")]
    if not steps:
        return ()
    return (PaceLine(at, "heartbeat", PaceMark(float(max(steps)), None, "heartbeat")),)

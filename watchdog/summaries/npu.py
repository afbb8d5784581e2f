"""Per-chip summary of the npu probe: condition runs, utilization and memory windows.

Each round costs O(chips) amortized; a detector pass asks each chip O(1) or O(log n) questions
instead of rebuilding every chip's series from the hour of history (which made a pass cost
chips x history).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Set, Tuple

from watchdog.config.schema import Config
from watchdog.observations import NpuChip, NpuObservation, ProcessObservation
from watchdog.core.state import Sample, StateView
from watchdog.summaries.window import LastBeyond, Run, Window, latest, run_start

PROBE = "npu"

ChipKey = Tuple[int, int]
MIB = 1024 * 1024


def chip_memory_mb(chip: NpuChip) -> Optional[Tuple[int, int]]:
    """(used, total) MB of the chip's device memory: HBM where the table has it (910/910B/A3),
    else DDR (310 series); None when neither is known."""
    if chip.hbm_total_mb and chip.hbm_used_mb is not None:
        return chip.hbm_used_mb, chip.hbm_total_mb
    if chip.memory_total_mb and chip.memory_used_mb is not None:
        return chip.memory_used_mb, chip.memory_total_mb
    return None


def live_ranks(view: StateView) -> int:
    """Rank processes the process probe sees now (0 when it has no observation)."""
    s = view.latest("process")
    if s is None or not isinstance(s.value, ProcessObservation):
        return 0
    return sum(1 for p in s.value.processes if p.state != "zombie")


def job_chips(obs: NpuObservation, npus: Any, ranks_alive: int) -> Set[ChipKey]:
    """The chips the job uses in one npu-smi round.

    Configured NPU ids win. Otherwise the chips on which npu-smi lists a process; when its process
    table is empty on every chip (inside a container npu-smi often cannot see the processes) but
    the process probe sees live ranks, every chip.
    """
    if npus:
        wanted = set(npus)
        return {(c.npu, c.chip) for c in obs.chips if c.npu in wanted}
    held = {(p.npu, p.chip) for p in obs.processes}
    present = {(c.npu, c.chip) for c in obs.chips}
    if held:
        return held & present
    if ranks_alive > 0:
        return present
    return set()


_INF = float("inf")


class ChipTrack:
    """One chip's readings, folded round by round.

    Threshold questions ("idle since when, below X %?") are answered for any threshold asked
    (monotonic stacks), so a reloaded config with other thresholds needs no rebuild from history.
    """

    def __init__(self) -> None:
        self.last: Optional[NpuChip] = None
        self.last_seen = 0.0
        self.times: Window[None] = Window()
        #: AI Core % per round while held (+inf / -inf when not held or unknown: never idle / busy).
        self.held_high, self.held_low = LastBeyond(), LastBeyond(lower=True)
        #: AI Core % per round, held or not (the stall rule looks at every job chip).
        self.util_high, self.util_low = LastBeyond(), LastBeyond(lower=True)
        self.temp_low = LastBeyond(lower=True)
        self.unhealthy = Run()
        #: AI Core % while held, None when not held or unknown; with the running sum of the known.
        self.util: Window[Optional[float]] = Window()
        self.util_sum = 0.0
        self.util_unknown = 0
        #: (time, (used, total) MB) of rounds with a memory reading.
        self.mem: Window[Tuple[int, int]] = Window()
        #: The npu detector's last memory-trend judgement of this window: (window key, trend)
        #: (watchdog.detectors.npu.chip_hbm_trend); recomputed only when the window changes.
        self.hbm_cache: Optional[Tuple[Any, Any]] = None
        # For the stall rule's "memory steady": rounds without / with a memory reading, and the
        # memory per round for any tolerance asked.
        self.mem_none: Optional[int] = None
        self.mem_known: Optional[int] = None
        self.mem_high = LastBeyond()
        self.mem_low = LastBeyond(lower=True)

    def stacks(self) -> Tuple[LastBeyond, ...]:
        return (self.held_high, self.held_low, self.util_high, self.util_low, self.temp_low,
                self.mem_high, self.mem_low)

    def add(self, t: float, c: NpuChip, held: bool, cfg: Config, history_start: float, now: float) -> None:
        self.last, self.last_seen = c, t
        seq = self.times.append(t, None)
        util = c.aicore_util_pct
        self.held_high.push(seq, util if held and util is not None else _INF)
        self.held_low.push(seq, util if held and util is not None else -_INF)
        self.util_high.push(seq, util if util is not None else _INF)
        self.util_low.push(seq, util if util is not None else -_INF)
        self.temp_low.push(seq, c.temp_c if c.temp_c is not None else -_INF)
        self.unhealthy.push(t, (c.health or "").strip().upper() != "OK")
        value = util if held else None
        self.util.append(t, value)
        self._count_util(value, 1)
        mem = chip_memory_mb(c)
        if mem is not None:
            self.mem.append(t, mem)
            self.mem_known = seq
            self.mem_high.push(seq, mem[0])
            self.mem_low.push(seq, mem[0])
        else:
            self.mem_none = seq
        self.trim(history_start, now, cfg)

    # -- runs: start of the trailing run in which a condition held (None: it does not hold now) --
    def idle_since(self, below_pct: float) -> Optional[float]:
        """Held by the job with AI Core below `below_pct`."""
        return run_start(self.times, self.held_high.last_beyond(below_pct, inclusive=True))

    def busy_since(self, above_pct: float) -> Optional[float]:
        """Held by the job with AI Core at or above `above_pct`."""
        return run_start(self.times, self.held_low.last_beyond(above_pct))

    def warm_since(self, at_c: float) -> Optional[float]:
        """At or above `at_c` degrees Celsius."""
        return run_start(self.times, self.temp_low.last_beyond(at_c))

    def _count_util(self, value: Optional[float], sign: int) -> None:
        if value is None:
            self.util_unknown += sign
        else:
            self.util_sum += sign * value

    def trim(self, history_start: float, now: float, cfg: Config) -> None:
        """Forget what no question can ask about any more (`now`: the earliest time a later
        question may be asked at)."""
        self.times.drop_before(history_start)
        for stack in self.stacks():
            stack.forget_before(self.times.first_seq)
        for v in self.util.drop_before(now - cfg.trends.low_util_for, keep_one_before=True):
            self._count_util(v, -1)
        self.mem.drop_before(now - cfg.trends.hbm_window, keep_one_before=True)

    def low_util_mean(self, start: float) -> Optional[Tuple[float, float, int]]:
        """(mean AI Core %, window start, samples) over a window from `start` held and known
        throughout; None when the history does not reach back to `start` yet."""
        w = self.util
        for v in w.drop_before(start, keep_one_before=True):
            self._count_util(v, -1)
        if len(w) < 2 or w.first()[0] > start or self.util_unknown:
            return None
        return self.util_sum / len(w), w.first()[0], len(w)

    def steady_since(self, idle: bool, tol_mb: float, idle_below: float, busy_above: float) -> Optional[float]:
        """For the stall rule: start of the trailing run in which the chip stayed idle (AI Core
        below `idle_below`) or pegged (at or above `busy_above`), held or not, with its memory
        within `tol_mb` of the newest reading."""
        mem = chip_memory_mb(self.last) if self.last is not None else None
        brk = (self.util_high.last_beyond(idle_below, inclusive=True) if idle
               else self.util_low.last_beyond(busy_above))
        if mem is None:
            brk = latest(brk, self.mem_known)
        else:
            brk = latest(brk, self.mem_none, self.mem_high.last_beyond(mem[0] + tol_mb),
                         self.mem_low.last_beyond(mem[0] - tol_mb))
        return run_start(self.times, brk)


class Summary:
    def __init__(self, config: Config):
        self.chips: Dict[ChipKey, ChipTrack] = {}
        #: Time of the first round folded.
        self.first_at: Optional[float] = None
        #: Chips the job held at the newest round.
        self.held: Set[ChipKey] = set()
        self.latest: Optional[Sample[NpuObservation]] = None
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        """Adopt a new config; what was folded stays (a reload is followed by no new round at
        once: forgetting the newest round made the stall rule read a round that was not there)."""
        self.config = config
        self.keep = float(config.probes.history)

    def add(self, sample: Sample, view: StateView) -> None:
        obs = sample.value
        if not isinstance(obs, NpuObservation):
            return
        t = sample.time
        if self.first_at is None:
            self.first_at = t
        held = job_chips(obs, self.config.trends.npus, live_ranks(view))
        now = min(t, view.now)
        for c in obs.chips:
            key = (c.npu, c.chip)
            track = self.chips.get(key)
            if track is None:
                track = self.chips[key] = ChipTrack()
            track.add(t, c, key in held, self.config, now - self.keep, now)
        self.held = held
        self.latest = sample

    def newest(self) -> NpuObservation:
        """The newest npu record folded. The npu detectors ask only once `latest` is set (they
        return nothing before the probe's first round)."""
        if self.latest is None:
            raise LookupError("no npu observation folded yet")
        return self.latest.value

    def chip(self, key: ChipKey) -> Optional[ChipTrack]:
        return self.chips.get(key)

    def seen_since(self, start: float) -> Dict[ChipKey, float]:
        """Chips seen at or after `start`, with the time they were last seen."""
        return {k: c.last_seen for k, c in self.chips.items() if c.last_seen >= start}

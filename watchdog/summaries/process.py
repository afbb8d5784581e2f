"""Summary of the process probe: CPU quiet stretches, per-process state runs, job-gone run.

One round costs O(processes); every question about "since when" is O(1) or O(log rounds).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from watchdog.config.schema import Config
from watchdog.observations import ProcessInfo, ProcessObservation
from watchdog.core.state import Sample, StateView
from watchdog.summaries.window import LastBeyond, Run, Window

PROBE = "process"

_INF = float("inf")


class StateRun:
    """Since when one process (pid + start time) has held its current state."""

    __slots__ = ("create_time", "state", "since", "round")

    def __init__(self, p: ProcessInfo, since: float, rnd: int):
        self.create_time, self.state, self.since, self.round = p.create_time, p.state, since, rnd


class Summary:
    def __init__(self, config: Config):
        self.reconfigure(config)
        #: Round times; a round's CPU delta covers (previous round, this round].
        self.rounds: Window[None] = Window()
        #: Per round: the highest rank CPU rate (inf when a rate is unknown or no process runs).
        self.max_rate = LastBeyond()
        self.rates: Dict[int, Optional[float]] = {}
        self.procs: Dict[int, Tuple[Optional[int], str]] = {}
        self.states: Dict[int, StateRun] = {}
        #: Rounds in which no process was alive (all zombies or none).
        self.gone = Run()
        self._prev_t: Optional[float] = None

    def reconfigure(self, config: Config) -> None:
        self.keep = float(config.probes.history)

    def add(self, sample: Sample, view: StateView) -> None:
        obs = sample.value
        if not isinstance(obs, ProcessObservation):
            return
        t, prev_t = sample.time, self._prev_t
        seq = self.rounds.append(t, None)
        rates: Dict[int, Optional[float]] = {}
        top = -_INF if obs.processes else _INF
        for p in obs.processes:
            if p.cpu_delta is None or prev_t is None or t <= prev_t:
                rates[p.pid] = None
                top = _INF
            else:
                rates[p.pid] = max(p.cpu_delta, 0.0) / (t - prev_t)
                top = max(top, rates[p.pid])  # type: ignore[type-var]
        self.max_rate.push(seq, top)
        self.rates = rates
        self.procs = {p.pid: (p.rank, p.state) for p in obs.processes}
        states: Dict[int, StateRun] = {}
        for p in obs.processes:
            old = self.states.get(p.pid)
            same = (old is not None and old.round == seq - 1 and old.state == p.state
                    and abs(old.create_time - p.create_time) < 0.01)
            states[p.pid] = StateRun(p, old.since if same and old else t, seq)
        self.states = states
        self.gone.push(t, not any(p.state != "zombie" for p in obs.processes))
        self._prev_t = t
        self.rounds.drop_before(t - self.keep - max(0.0, t - view.now))
        self.max_rate.forget_before(self.rounds.first_seq)

    def quiet_since(self, rate_below: float) -> Optional[float]:
        """Start of the unbroken stretch of rounds in which every rank stayed below the rate."""
        if len(self.rounds) == 0:
            return None
        brk = self.max_rate.last_beyond(rate_below, inclusive=True)
        if brk is None:
            # No round broke the run within the history: it started with the oldest round kept.
            return self.rounds.first()[0]
        if brk >= self.rounds.next_seq - 1:
            return None
        # The round after the break starts where the break ended.
        return self.rounds.time_of(brk)

    def state_since(self, p: ProcessInfo) -> float:
        run = self.states.get(p.pid)
        return run.since if run is not None else 0.0

"""The in-memory state store: latest observation and short history per probe, plus probe health.

Probes write, detectors and the metrics collector read a consistent, immutable view. History is
bounded by age (not by count), so a probe interval change does not change what trend detectors see.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import (Any, Callable, Deque, Dict, Generic, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar, Union, overload)

from watchdog.host import clock
from watchdog.service import statefiles


#: A probe's record type.
R = TypeVar("R")


@dataclass(frozen=True)
class Sample(Generic[R]):
    """One observation a probe made at `time`."""

    time: float
    value: R


class RecordKey(str, Generic[R]):
    """The name a probe's records are stored under, typed with the record: declared beside the
    record (`NPU: RecordKey[NpuObservation] = RecordKey("npu")`), so `view.latest(NPU)` is a
    `Sample[NpuObservation]` to the reader and the type checker, and nobody asks a record with
    `getattr` what it holds. It is the probe's name (a `str`), so the store and the probe's
    status keep one key per probe."""

    __slots__ = ()


class FailureReason(str, Enum):
    """Why a probe's last round failed, as the probe said it (`ProbeError.reason`); detectors
    read this, never the wording of the message. npu-smi's reasons are the `reason` label of
    `npu_watchdog_npu_smi_failures_total` (watchdog.npusmi.run.REASONS)."""

    #: The probe could not observe, for no more specific reason (its message says what).
    ERROR = "error"
    #: The probe raised something it did not expect (a bug): the message names the type.
    UNEXPECTED = "unexpected"
    #: npu-smi hung and was killed.
    TIMEOUT = "timeout"
    #: npu-smi exited non-zero.
    EXIT = "exit"
    #: npu-smi's output could not be read.
    PARSE = "parse"
    #: npu-smi answered that the device or driver is unavailable.
    UNAVAILABLE = "unavailable"
    #: npu-smi is not installed (or not executable).
    MISSING = "missing"


@dataclass(frozen=True)
class ProbeStatus:
    """How a probe is doing: the scheduler's record, exported as metrics and shown by `status`."""

    name: str
    interval: float
    up: bool = False
    runs_total: int = 0
    errors_total: int = 0
    timeouts_total: int = 0
    last_run: Optional[float] = None
    last_success: Optional[float] = None
    last_duration: Optional[float] = None
    last_error: Optional[str] = None
    #: True while a timed-out round is still stuck in its worker thread.
    hung: bool = False
    #: A short human summary of what the last successful round saw.
    last_result: Optional[str] = None
    #: Why the last round failed (None after a success, and for a round that timed out or is
    #: still stuck: `hung` says that).
    reason: Optional[FailureReason] = None


@dataclass(frozen=True)
class StateView:
    """An immutable snapshot of the store for one detector pass or one scrape."""

    now: float
    started_at: float
    #: Per probe, its samples oldest first: a tuple, or a sequence filtered from one (a
    #: discovered job's view, watchdog.detectors.jobs).
    samples: Mapping[str, Sequence[Sample]]
    statuses: Mapping[str, ProbeStatus]
    #: Damaged state files this process set aside (watchdog.service.statefiles), for `state_damaged`.
    damage: Tuple[Any, ...] = ()
    #: Per-probe incremental summaries kept up to date by the daemon's detector runner (see
    #: watchdog.summaries); None: folded from this view's history on first use.
    summaries: Optional[Mapping[str, Any]] = None
    #: The runner's per-job summaries (watchdog.detectors.jobs.JobSummaries) for discovered jobs;
    #: None: a job's view folds its own from its filtered history on first use.
    job_summaries: Any = None
    #: Results computed once per view and shared by the detectors and the metrics of one pass.
    memo: Dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def once(self, key: Any, compute: Callable[[], Any]) -> Any:
        """compute() the first time `key` is asked for in this view, the same answer after."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    @overload
    def latest(self, probe: RecordKey[R]) -> Optional[Sample[R]]: ...

    @overload
    def latest(self, probe: str) -> Optional[Sample[Any]]: ...

    def latest(self, probe: Union[RecordKey[R], str]) -> Optional[Sample[Any]]:
        hist = self.samples.get(probe)
        return hist[-1] if hist else None

    @overload
    def history(self, probe: RecordKey[R]) -> Sequence[Sample[R]]: ...

    @overload
    def history(self, probe: str) -> Sequence[Sample[Any]]: ...

    def history(self, probe: Union[RecordKey[R], str]) -> Sequence[Sample[Any]]:
        return self.samples.get(probe, ())

    def status(self, probe: str) -> Optional[ProbeStatus]:
        return self.statuses.get(probe)


class StateStore:
    """Thread-safe store; all mutation goes through `put` and `update_status`."""

    def __init__(self, history_seconds: float = 3600.0, max_samples: int = 4096):
        self._lock = threading.Lock()
        self._history_seconds = history_seconds
        self._max_samples = max_samples
        self._samples: Dict[str, Deque[Sample]] = {}
        self._statuses: Dict[str, ProbeStatus] = {}
        self.started_at = clock.now()

    def put(self, probe: str, value: Any, at: Optional[float] = None) -> None:
        at = clock.now() if at is None else at
        with self._lock:
            hist = self._samples.setdefault(probe, deque(maxlen=self._max_samples))
            hist.append(Sample(at, value))
            cutoff = at - self._history_seconds
            while len(hist) > 1 and hist[0].time < cutoff:
                hist.popleft()

    def register(self, name: str, interval: float) -> None:
        """Make a probe known (so it shows as down until its first success)."""
        with self._lock:
            old = self._statuses.get(name)
            self._statuses[name] = replace(old, interval=interval) if old else ProbeStatus(name, interval)

    def unregister_missing(self, names: Iterable[str]) -> None:
        keep = set(names)
        with self._lock:
            for name in list(self._statuses):
                if name not in keep:
                    del self._statuses[name]
                    self._samples.pop(name, None)

    def update_status(self, name: str, **changes: Any) -> ProbeStatus:
        with self._lock:
            old = self._statuses.get(name) or ProbeStatus(name, 0.0)
            new = replace(old, **changes)
            self._statuses[name] = new
            return new

    def status(self, name: str) -> Optional[ProbeStatus]:
        with self._lock:
            return self._statuses.get(name)

    def view(self, now: Optional[float] = None) -> StateView:
        with self._lock:
            return StateView(
                now=clock.now() if now is None else now,
                started_at=self.started_at,
                samples={k: tuple(v) for k, v in self._samples.items()},
                statuses=dict(self._statuses),
                damage=statefiles.events(),
            )

    @overload
    def latest(self, probe: RecordKey[R]) -> Optional[Sample[R]]: ...

    @overload
    def latest(self, probe: str) -> Optional[Sample[Any]]: ...

    def latest(self, probe: Union[RecordKey[R], str]) -> Optional[Sample[Any]]:
        """The newest sample of a probe without copying its history (for scrapes)."""
        with self._lock:
            hist = self._samples.get(probe)
            return hist[-1] if hist else None

    def statuses(self) -> List[ProbeStatus]:
        with self._lock:
            return list(self._statuses.values())

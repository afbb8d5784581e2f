"""The running daemon's shared objects, handed to metrics, the status API, commands and snapshots.

Everything here is read-mostly; the daemon's reload is the only writer of `config`, and it swaps a
new (frozen) config in whole. What the readers may call on the daemon's parts is spelled out as
small Protocols below, so a reader depends on those few methods and not on the classes (which sit
in layers above this module: the alert engine, the snapshot taker, the HTTP endpoint).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from watchdog.compat import Protocol  # 3.7: from typing_extensions

from watchdog.host import clock
from watchdog.config.schema import Config
from watchdog.discovery.feed import DiscoveryFeed
from watchdog.core.findings import Finding
from watchdog.core.state import StateStore


class StorageHealthView(Protocol):
    """The state folder as the engine's commits see it (metrics, /healthz)."""

    @property
    def since(self) -> Optional[float]: ...

    @property
    def error(self) -> str: ...

    @property
    def errors_total(self) -> int: ...

    @property
    def writable(self) -> bool: ...


class AlertStateView(Protocol):
    """One alert as the metrics count it."""

    rule: str
    severity: str
    state: str
    labels: Dict[str, str]
    finding: Dict[str, Any]
    firing_since: Optional[float]
    muted: Optional[str]


class DeadManView(Protocol):
    """The alerting dead-man pinger's counts by result ("ok", "failed")."""

    @property
    def counts(self) -> Mapping[str, int]: ...


class AlertEngineView(Protocol):
    """What the daemon, `status` and the metrics use of the alert engine."""

    @property
    def deadman(self) -> DeadManView: ...

    def process(self, findings: List[Finding], now: Optional[float] = None,
                blind: AbstractSet[str] = frozenset()) -> None: ...

    def current(self) -> List[Finding]: ...

    def reconfigure(self, config: Config) -> None: ...

    def round_complete(self) -> None: ...

    def storage_health(self) -> StorageHealthView: ...

    def check_storage(self) -> None: ...

    def alert_states(self) -> Sequence[AlertStateView]: ...

    def silences_active(self) -> int: ...

    def close(self) -> None: ...


class OutboxView(Protocol):
    """The durable outbox as the metrics read it: sends by (channel, result), backlog."""

    @property
    def counts(self) -> Mapping[Tuple[str, str], int]: ...

    def stats(self) -> Tuple[int, float]: ...


class SnapshotService(Protocol):
    """The evidence-bundle taker: the engine requests, metrics read stats, the daemon stops it."""

    def request(self, finding: Finding) -> Optional[str]: ...

    def stats(self) -> Dict[str, Any]: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


class HttpView(Protocol):
    """The HTTP endpoint's connection counts (open, limit, dropped by reason)."""

    def connection_stats(self) -> Dict[str, Any]: ...


@dataclass
class Runtime:
    config: Config
    state: StateStore
    engine: Optional[AlertEngineView] = None
    config_path: Optional[str] = None
    started_at: float = field(default_factory=clock.now)
    config_loaded_at: float = field(default_factory=clock.now)
    #: Named counters of the daemon core (detector errors, reloads...).
    counters: Dict[str, int] = field(default_factory=dict)
    #: The parts that features attach, each None when off; metrics read them.
    snapshots: Optional[SnapshotService] = None
    outbox: Optional[OutboxView] = None
    discovery: Optional[DiscoveryFeed] = None
    http: Optional[HttpView] = None
    #: Errors of the last detector pass (shown by `status`).
    detector_errors: List[str] = field(default_factory=list)
    #: Set by the scheduler: next run time per probe (epoch seconds).
    next_runs: Dict[str, Optional[float]] = field(default_factory=dict)
    #: Metric samples computed at the last detector pass, per metric module (see
    #: watchdog.metrics.collector.evaluated_metrics); replaced whole, never mutated.
    evaluated: Dict[str, List[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def publish(self, evaluated: Dict[str, List[Any]]) -> None:
        self.evaluated = evaluated

    def bump(self, name: str, by: int = 1) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + by

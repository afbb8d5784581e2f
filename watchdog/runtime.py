"""The running daemon's shared objects, handed to metrics, the status API and commands.

Everything here is read-mostly; the daemon's main loop is the only writer of `config`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from watchdog.config.schema import Config
from watchdog.core.state import StateStore


@dataclass
class Runtime:
    config: Config
    state: StateStore
    engine: Any
    config_path: Optional[str] = None
    started_at: float = field(default_factory=time.time)
    config_loaded_at: float = field(default_factory=time.time)
    #: Named counters of the daemon core (detector errors, reloads...).
    counters: Dict[str, int] = field(default_factory=dict)
    #: Optional services that features attach (e.g. "outbox", "snapshots"); metrics read them.
    services: Dict[str, Any] = field(default_factory=dict)
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

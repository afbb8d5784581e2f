"""The alert engine's interface, and the logging engine used until channels are configured.

The engine receives the complete list of findings after every detector pass. It is the only
component with memory of what already fired; detectors stay pure.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List, Optional

from watchdog.config.schema import Config
from watchdog.findings import Finding

log = logging.getLogger("watchdog.alerts")


class LoggingEngine:
    """Logs a finding when it appears, when it changes severity or summary, and when it clears."""

    def __init__(self, config: Config, runtime: Optional[Any] = None):
        self.config = config
        self.runtime = runtime
        self._lock = threading.Lock()
        self._current: Dict[str, Finding] = {}

    def process(self, findings: List[Finding], now: float) -> None:
        new = {f.key: f for f in findings}
        with self._lock:
            old = self._current
            for key, f in new.items():
                prev = old.get(key)
                if prev is None:
                    self._request_snapshot(f)  # snapshots hook (see _request_snapshot)
                    log.warning("finding %s [%s] %s labels=%s", f.rule, f.severity, f.summary, f.labels,
                                extra={"finding": f.to_dict(), "event": "finding_new"})
                elif prev.severity != f.severity:
                    log.warning("finding %s [%s -> %s] %s", f.rule, prev.severity, f.severity, f.summary,
                                extra={"finding": f.to_dict(), "event": "finding_changed"})
            for key, f in old.items():
                if key not in new:
                    log.info("finding resolved %s %s labels=%s", f.rule, f.summary, f.labels,
                             extra={"finding": f.to_dict(), "event": "finding_resolved"})
            self._current = new

    # --- snapshots hook (minimal; the full alert engine calls the same contract) ---------------
    def _request_snapshot(self, f: Finding) -> None:
        """Ask the snapshot taker (if any) for a snapshot of a newly firing finding.

        The taker applies its own policy (default: critical findings only; Finding.snapshot and
        per-rule config override), rate limit and disk floor, and returns at once.
        """
        taker = self.runtime.services.get("snapshots") if self.runtime is not None else None
        if taker is None:
            return
        try:
            path = taker.request(f)
        except Exception:
            log.exception("snapshot request for %s failed", f.rule)
            return
        if path:
            log.warning("snapshot of %s: %s", f.rule, path, extra={"event": "snapshot_requested", "path": path})

    def current(self) -> List[Finding]:
        with self._lock:
            return list(self._current.values())

    def reconfigure(self, config: Config) -> None:
        self.config = config

    def close(self) -> None:
        pass


def build_engine(config: Config, runtime: Any) -> LoggingEngine:
    """The daemon's engine. `runtime.services` may hold a snapshot taker (see watchdog.snapshots)."""
    return LoggingEngine(config, runtime)

"""Config reload: the one path by which the running config changes.

SIGHUP starts a reload; a thread reads and validates the file and builds the probes (so a hostile
file never wedges the main loop); the main loop swaps the new frozen config in whole when the
result arrives, or gives up after RELOAD_TIMEOUT_SECONDS. A SIGHUP during a reload starts a newer
one and the older result is dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple, Union

from watchdog.config import Config, ConfigError
from watchdog.config.load import load_config
from watchdog.config.placeholders import refusal
from watchdog.probes.base import Probe
from watchdog.runtime import Runtime
from watchdog.service.sdnotify import Notifier

log = logging.getLogger("watchdog.daemon")

#: A reload (read, validate, build probes) that takes longer is abandoned: the running config stays.
#: The loader's own limits (watchdog/config/yamlsafe.py) bound its memory; this bounds its time.
RELOAD_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Prepared:
    """A reload's result that passed: the new config and the probes built from it."""

    config: Config
    probes: List[Probe]


Outcome = Union[Prepared, BaseException]

#: Settings read once at start (the HTTP listener and the log format): a reload accepts a new
#: value and says that it takes effect at the next restart; every other setting applies at once.
RESTART_ONLY: Tuple[Tuple[str, Callable[[Config], object]], ...] = (
    ("http.enabled", lambda c: c.http.enabled),
    ("http.listen", lambda c: c.http.listen),
    ("http.max_connections", lambda c: c.http.max_connections),
    ("http.connection_timeout", lambda c: c.http.connection_timeout),
    ("logging.format", lambda c: c.logging.format),
)


def restart_only_changes(old: Config, new: Config) -> List[str]:
    """The RESTART_ONLY keys whose value a reload changed (`http.listen`, ...)."""
    return [key for key, read in RESTART_ONLY if read(old) != read(new)]


class PlaceholderConfig(ValueError):
    """A reloaded config whose channel URL is still a placeholder (the running one stays)."""


class Reloader:
    """Runs reloads in a thread, one generation at a time; the main loop takes the outcome
    (`outcomes`) and swaps a passed one in, or has it reported here (`reject`, `overdue`)."""

    def __init__(self, config_path: Optional[str], running: Callable[[], Config],
                 build_probes: Callable[[Config], List[Probe]], wake: Callable[[], None],
                 runtime: Runtime, notifier: Notifier, status_line: Callable[[], str]):
        self.config_path = config_path
        self._running = running
        self._build_probes = build_probes
        #: Called from the reload thread when its outcome is ready (wakes the main loop).
        self._wake = wake
        self._runtime = runtime
        self._notifier = notifier
        self._status_line = status_line
        self._gen = 0
        self._started: Optional[float] = None
        self._results: "queue.Queue[Tuple[int, Outcome]]" = queue.Queue()

    def start(self) -> None:
        self._notifier.reloading()
        self._gen += 1
        gen = self._gen
        self._started = time.monotonic()

        def work() -> None:
            self._results.put((gen, self.prepare()))
            self._wake()

        threading.Thread(target=work, name="config-reload", daemon=True).start()

    def outcomes(self) -> List[Outcome]:
        """The outcome of the reload in flight, if it has arrived (older ones are dropped)."""
        out: List[Outcome] = []
        while True:
            try:
                gen, result = self._results.get_nowait()
            except queue.Empty:
                return out
            if gen == self._gen and self._started is not None:
                self._started = None
                out.append(result)
            elif isinstance(result, Prepared):  # overdue or superseded: its probes never run
                for probe in result.probes:
                    try:
                        probe.discard()
                    except Exception:  # a leak at worst; never the main loop's end
                        log.exception("releasing the %s probe of a dropped reload failed", probe.name)

    def check_time(self, now: float) -> None:
        """Abandon the reload in flight once it has run past RELOAD_TIMEOUT_SECONDS (its result,
        if it ever comes, is dropped); the running config stays."""
        if self._started is None or now - self._started < RELOAD_TIMEOUT_SECONDS:
            return
        self._started = None
        self._gen += 1
        self._runtime.bump("reload_failure")
        log.error("reload of %s did not finish within %gs; keeping the running config",
                  self.config_path, RELOAD_TIMEOUT_SECONDS)
        self._notifier.ready("reload timed out; " + self._status_line())

    def reject(self, exc: BaseException) -> None:
        """Report a reload that failed: the running config stays."""
        self._runtime.bump("reload_failure")
        if isinstance(exc, ConfigError):
            log.error("reload rejected, keeping the running config:\n%s", exc.render())
            self._notifier.ready(f"reload rejected ({len(exc.errors)} errors); " + self._status_line())
        else:
            log.error("reload rejected, keeping the running config: %s: %s", type(exc).__name__, exc)
            self._notifier.ready("reload rejected; " + self._status_line())

    def prepare(self) -> Outcome:
        """The new config (keeping the running `paths`) and its probes, or the exception that
        rejects them."""
        try:
            running = self._running()
            loaded = load_config(self.config_path)
            if loaded.paths.state_dir != running.paths.state_dir:
                log.warning("paths.state_dir changed: takes effect at the next restart")
            refused = refusal(loaded)
            if refused:
                raise PlaceholderConfig(refused)
            # The running state (and a --state-dir override) stays: a new config, never an edit.
            new = loaded.model_copy(update={"paths": running.paths})
            return Prepared(new, self._build_probes(new))
        except Exception as exc:  # reported when applied; the running config stays
            return exc

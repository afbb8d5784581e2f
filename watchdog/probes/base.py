"""What a probe is: a named thing that collects one observation per round.

A probe knows nothing of alerts, channels or metrics: it returns an observation (a record from
`watchdog.observations`) and a one-line summary. Raising is allowed and expected on failure: the
scheduler turns an exception into "probe down" (metric + log) and runs the next round normally.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from watchdog.config.schema import Config
from watchdog.discovery.feed import DiscoveryFeed, feed_for
from watchdog.core.state import FailureReason


@dataclass
class ProbeContext:
    """What a probe may use besides its own config: the daemon-wide config and the state dir."""

    config: Config
    state_dir: str
    #: The daemon's shared discovery result (a private one is made when absent, e.g. `probe`).
    feed: Optional[DiscoveryFeed] = None

    def discovery_feed(self) -> DiscoveryFeed:
        if self.feed is None:
            self.feed = feed_for(self.config)
        return self.feed


@dataclass(frozen=True)
class Collected:
    """A probe round's result: the observation to store and a short human summary."""

    value: Any
    summary: str = ""
    #: Nothing a detector reads changed in a way that needs judging now (e.g. a log round that
    #: read lines but matched nothing): the scheduler skips the detector pass after it.
    quiet: bool = False
    #: This node has nothing for the probe to watch (no hccn_tool): the scheduler runs its rounds
    #: only every `scheduler.IDLE_SECONDS` until a round finds something again.
    idle: bool = False
    #: The round left work behind (a log backlog past its byte budget): a probe with change events
    #: gets its next round at once, even after quiet rounds (`scheduler.next_gap`).
    more: bool = False


class ProbeError(Exception):
    """A probe could not observe; the message is shown in logs, `status` and the probe_down
    finding, the `reason` (kept in ProbeStatus.reason) is what detectors tell failures apart by."""

    def __init__(self, message: str, reason: FailureReason = FailureReason.ERROR):
        super().__init__(message)
        self.reason = reason


class Probe:
    """Base class. Subclasses set `name`, `interval`, `timeout` and implement `collect`."""

    name: str = "probe"
    interval: float = 10.0
    timeout: Optional[float] = None
    #: With change events: rounds that find nothing may come further apart (up to 2 s) while
    #: changes keep coming. False where what is not read soon is lost (a ring buffer).
    spaces_quiet_rounds: bool = True

    def collect(self) -> Collected:  # pragma: no cover - abstract
        raise NotImplementedError

    def wait_change(self, timeout: float) -> bool:
        """Wait up to `timeout` for a change worth a round now (new log lines, kernel records);
        True if one came. Only probes that override this have change events: the scheduler then
        also runs their rounds when changes arrive (see `follows_changes`)."""
        return False

    @property
    def follows_changes(self) -> bool:
        return type(self).wait_change is not Probe.wait_change

    def reconfigure(self, new: "Probe") -> bool:
        """Adopt the settings of `new` (built from a reloaded config) keeping runtime state.

        Return True if adopted; False makes the daemon replace this probe by `new`.
        """
        return False

    def close(self) -> None:
        """Release resources (files, persisted offsets) at shutdown or removal."""

    def discard(self) -> None:
        """Release a probe built for a reload that never ran: the running probe took its settings
        over, or the reload was dropped. It must persist nothing: what it would save would
        overwrite what the running probe saved. `close` by default, which is right where close
        saves only what a round read (the logs probe's tailer saves nothing before its first
        round); a probe whose close saves regardless (heartbeat progress) overrides this."""
        self.close()

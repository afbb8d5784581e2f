"""What the daemon does once at start (and says again on reload): its private folders, the
warnings about settings that would otherwise fail in silence."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from watchdog.service import fdbudget, statelock
from watchdog.config import Config
from watchdog.http.server import HttpEndpoint, MetricsSource
from watchdog.config.pathcheck import unmatched_paths
from watchdog.logrules.matcher import BULK_MIN_BYTES, BULK_WINDOW, SLOW_ENGINE_ADVICE, effective_engine
from watchdog.probes.discovered_logs import SECTION as LOGS_CONFIG

log = logging.getLogger("watchdog.daemon")


def ensure_private_dir(path: str) -> None:
    """Create a directory the daemon writes to, owner-only (0700). One that another user owns is
    taken over (that user could otherwise read and change the alert state, the silences and the
    snapshots through the owner's rights, whatever the mode): said in a warning."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        owner = os.stat(path).st_uid
        if owner != os.geteuid():
            os.chown(path, os.geteuid(), os.getegid())
            log.warning("%s belonged to uid %d; it is the daemon's private folder: now owned by uid %d, mode 0700",
                        path, owner, os.geteuid())
        os.chmod(path, 0o700)
    except OSError as exc:  # not ours, or read-only: writes there report themselves
        log.warning("cannot tighten permissions of %s: %s", path, exc.strerror or exc)


def report_setup(config: Config) -> None:
    """Say at start and on reload what would otherwise fail in silence: the slow log engine,
    configured paths that match nothing (the `path_unmatched` finding follows after start_grace)."""
    logs = LOGS_CONFIG.of(config)
    engine = effective_engine(logs.engine)
    if logs.enabled and engine == "re":
        log.warning(SLOW_ENGINE_ADVICE)
    elif logs.engine == "auto" and engine == "re2":
        log.info("log rules run on the re2 engine (imported once the logs read %d KiB within %.0f s)",
                 BULK_MIN_BYTES >> 10, BULK_WINDOW)
    else:
        log.info("log rules run on the %s engine", engine)
    for line in unmatched_paths(config):
        log.warning("config: %s", line)


class StateFolder:
    """The state folder and its lock, held for the daemon's lifetime (raises StateFolderBusy when
    another daemon holds it)."""

    def __init__(self, path: str):
        self.path = path
        #: None while the folder cannot be created or locked yet (a full or read-only disk at
        #: boot): the daemon runs on and `check` takes the lock once it can.
        self.lock_fd: Optional[int] = None
        #: The lock on the folder itself (None where the filesystem refuses it): it holds when
        #: the lock file is deleted under the daemon.
        self.dir_fd: Optional[int] = None
        try:
            ensure_private_dir(path)
            self.dir_fd = statelock.lock_dir(path)
            self.lock_fd = statelock.acquire(path)
        except OSError as exc:  # StateFolderBusy is no OSError: another daemon still stops this one
            log.error("cannot create or lock the state folder %s now (%s); the daemon runs on with its alert "
                      "state in memory and takes the folder when it can", path, exc.strerror or exc,
                      extra={"event": "state_unwritable"})

    def check(self) -> None:
        """A state folder deleted under the daemon (or not creatable at start) is created and its
        lock taken, so no second daemon can start on it. Raises OSError / StateFolderBusy (retried
        by the caller)."""
        if self.lock_fd is not None and statelock.held(self.lock_fd, self.path):
            return
        ensure_private_dir(self.path)
        if not statelock.same_dir(self.dir_fd, self.path):  # deleted whole, or never locked
            new_dir = statelock.lock_dir(self.path)
            if self.dir_fd is not None:
                os.close(self.dir_fd)
            self.dir_fd = new_dir
        fd = statelock.acquire(self.path)
        if self.lock_fd is None:
            log.warning("the state folder %s can be used now; its lock is taken", self.path)
        else:
            os.close(self.lock_fd)
            log.warning("the lock of the state folder %s was deleted; taken again", self.path)
        self.lock_fd = fd


def start_http(config: Config, registry: MetricsSource, status: Callable[[], Dict[str, Any]],
               healthy: Callable[[], Tuple[bool, str]], status_remote: Callable[[], bool],
               attach: Callable[[HttpEndpoint], None], quiet: bool = False) -> Optional[HttpEndpoint]:
    """Listen with a connection cap that leaves the probes their descriptors (fdbudget); None
    (said in the log, at debug level when `quiet`) when the address cannot be had. `attach` sees
    the endpoint before it serves."""
    soft = fdbudget.raise_soft_limit()
    cap = fdbudget.connection_cap(config.http.max_connections, soft, fdbudget.open_fds())
    try:
        http = HttpEndpoint(config.http.host, config.http.port, registry, status, healthy,
                            max_connections=cap, connection_timeout=config.http.connection_timeout,
                            status_remote=status_remote)
    except OSError as exc:
        log.log(logging.DEBUG if quiet else logging.ERROR, "cannot listen on %s: %s", config.http.listen,
                exc.strerror or exc)
        return None
    attach(http)
    http.start()
    log.info("serving /metrics on http://%s:%d/ (at most %d connections; open-files limit %d, %d kept for probes)",
             config.http.host, http.port, cap, soft, fdbudget.PROBE_RESERVE)
    return http


class ListenLater:
    """Listening again and again while the address cannot be had (another process holds the
    port, the interface is not up yet): a taken port is no reason to exit, which under systemd
    would be a restart loop that sends nothing while the squatter answers /healthz. The alerts go
    out meanwhile; the journal says so once, and again when the daemon listens."""

    #: Seconds between attempts: doubling from the first to the last.
    FIRST, LAST = 1.0, 30.0

    def __init__(self, listen: str, attempt: Callable[[], bool]):
        self.listen = listen
        self.attempt = attempt
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="http-listen", daemon=True)

    def start(self) -> None:
        log.error("the daemon runs on without /metrics, /healthz and /api/status, and alerts are still sent; "
                  "trying to listen on %s again every %g s at most", self.listen, self.LAST,
                  extra={"event": "http_unbound"})
        self.thread.start()

    def _run(self) -> None:
        started, wait = time.monotonic(), self.FIRST
        while not self.stop.wait(wait):
            try:
                if self.attempt():
                    log.warning("listening on %s after %.0f s of trying", self.listen, time.monotonic() - started,
                                extra={"event": "http_bound"})
                    return
            except Exception:  # never the end of the retries: the next attempt may work
                log.exception("listening on %s failed", self.listen)
            wait = min(self.LAST, wait * 2)

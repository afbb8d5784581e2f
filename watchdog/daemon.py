"""Wiring and the main loop of `npu-watchdog run`.

Signal handlers only queue the signal; the main loop acts on it (reload, stop), feeds the systemd
watchdog only while rounds really complete, and keeps STATUS= current. Its parts live in
watchdog.wiring: the reload, the status document, the health check, the keep-alive pings, start-up
and shutdown.
"""

from __future__ import annotations

import gc
import logging
import queue
import signal
import threading
import time
from typing import AbstractSet, Any, Dict, FrozenSet, List, Optional, Tuple, Union

from watchdog.host import clock
from watchdog import __version__
from watchdog.plugins_list import assemble
from watchdog.service import statelock
from watchdog.alerting.decide.core import SnapshotRequester
from watchdog.alerting.engine import AlertEngine
from watchdog.alerting.deliver.outbox import DeadMan, Outbox
from watchdog.alerting.deliver.store import AlertStore
from watchdog.config import Config
from watchdog.detectors import IncrementalDetectors, blind_rules, load_detectors
from watchdog.discovery.feed import feed_for, scan_options
from watchdog.http.server import HttpEndpoint, MetricsSource
from watchdog.privacy.redact import Redactor, config_secrets
from watchdog.service.logsetup import redact_with, set_level
from watchdog.metrics.collector import evaluated_metrics, make_registry
from watchdog.probes import ProbeContext, build_probes
from watchdog.probes.base import Probe
from watchdog.runtime import AlertEngineView, Runtime
from watchdog.scheduler import IDLE_TICK_SECONDS, TICK_SECONDS, ProbeScheduler
from watchdog.snapshots import build_snapshot_taker
from watchdog.service.sdnotify import Notifier, watchdog_interval
from watchdog.service.signals import deliver_to, inbox
from watchdog.core.delivery import LOST
from watchdog.core.state import StateStore
from watchdog.wiring.health import LOOP_STALL_SECONDS, Liveness, health
from watchdog.wiring.keepalive import KeepAlive
from watchdog.wiring.reload import RELOAD_TIMEOUT_SECONDS, Outcome, Reloader, restart_only_changes
from watchdog.wiring.shutdown import shut_down
from watchdog.wiring.startup import ListenLater, StateFolder, ensure_private_dir, report_setup, start_http
from watchdog.wiring.status import build_status, status_line

log = logging.getLogger("watchdog.daemon")

__all__ = ["Daemon", "ensure_private_dir", "LOOP_STALL_SECONDS", "RELOAD_TIMEOUT_SECONDS"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Put on the signal queue by the reload thread when its result is ready (not a real signal).
RELOAD_READY = -1
#: Samples the state store keeps per probe: only until the detector runner has folded them into
#: its summaries (a pass runs at least every few seconds), which remember `probes.history`. An
#: hour of raw samples was most of the daemon's memory growth (~30 MB at 64 ranks). With discovery
#: each job's summaries are fed the same way (watchdog.detectors.jobs.JobSummaries).
RETAIN_SECONDS = 120.0
#: A detector that ran this recently keeps its answer in a pass its probes' rounds did not start
#: (the tick comes every TICK_SECONDS; the margin only skips a coalesced double fire).
FRESH_WITHIN = 0.8 * TICK_SECONDS
#: While nothing is found, a periodic pass is skipped as long as every answer is this recent: the
#: passes of the rounds (every 10 s at the shipped intervals) bring every answer older than
#: FRESH_WITHIN up to date, so at idle the tick only has work when rounds stop or are slow
#: (docs/architecture.md, "When detectors run").
SKIP_WITHIN = 2 * TICK_SECONDS + 1.0
#: Queued (like a signal) when every probe has finished its first round, so READY=1 goes out at
#: once instead of at the main loop's next wake-up.
FIRST_ROUND = -2


def install_signal_handlers(signals: "queue.SimpleQueue[int]") -> None:
    """The handlers only queue the signal, into a queue safe to fill from a handler (see
    watchdog.service.signals): the main loop acts on it. Installed before the port opens: once it
    answers, a SIGHUP (a reload) may come, and Python's default for it ends the process."""
    deliver_to(signals, STOP_SIGNALS + (signal.SIGHUP,))


class Daemon:
    engine: AlertEngineView

    def __init__(self, config: Config, config_path: Optional[str]):
        assemble()  # the plugins (already, when `config` was loaded: the entry point ran it)
        self.config_path = config_path
        # Before anything opens the state (raises StateFolderBusy when another daemon holds it).
        self.state_folder = StateFolder(config.paths.state_dir)
        self.state = StateStore(history_seconds=RETAIN_SECONDS)
        self.runtime = Runtime(config=config, state=self.state, config_path=config_path)
        self.runtime.started_at = self.state.started_at
        # Optional services first: the engine asks the snapshot taker for the evidence of what it pages.
        self.runtime.snapshots = build_snapshot_taker(config, self.runtime)
        self.engine = self._build_engine(config, self.runtime.snapshots)
        # One discovery result shared by the probes it feeds (kept across reloads).
        self.feed = feed_for(config)
        self.runtime.discovery = self.feed
        self.runtime.engine = self.engine
        self.detectors = IncrementalDetectors(load_detectors())
        self._eval_lock = threading.Lock()
        self.signals = inbox()
        self.notifier = Notifier()
        self.scheduler = ProbeScheduler(
            self.state, config.probes.default_timeout, config.probes.jitter,
            on_round=self._after_round, tick=self._periodic,
            on_complete_round=self._after_complete_round,
            on_first_round=lambda: self.signals.put(FIRST_ROUND),
        )
        #: Set once the first round of every probe has been evaluated and READY=1 sent; until then
        #: /healthz answers 503 (the daemon cannot vouch for anything yet).
        self.ready = False
        self.http: Optional[HttpEndpoint] = None
        #: Retries the listening address while it cannot be had (None: listening, or not tried).
        self.listen_later: Optional[ListenLater] = None
        self._http_lock = threading.Lock()
        self._last_periodic_eval = 0.0
        #: Detector passes run, and periodic ones skipped as needless (tests count them); `idle`:
        #: the last periodic one was, nothing found since (the main loop slows the tick then).
        self.passes, self.periodic_skipped, self.idle = 0, 0, False
        self.stopping = False
        #: Reloads run in a thread (watchdog.wiring.reload); RELOAD_READY wakes the main loop.
        self.reloader = Reloader(config_path, lambda: self.config, self._build_probes,
                                 wake=lambda: self.signals.put(RELOAD_READY), runtime=self.runtime,
                                 notifier=self.notifier, status_line=self.status_line)
        self._loop_beat = time.monotonic()

    def _build_engine(self, config: Config, snapshots: Optional[SnapshotRequester]) -> AlertEngine:
        """The alert engine and the parts it is handed: its store, the outbox (registered for the
        metrics) and the dead-man pinger; the engine closes them when it closes."""
        store = AlertStore(config.paths.state_dir, quarantine_damaged=True, defer_faults=True)
        outbox = Outbox(store, config.alerting)
        # A page a channel drops reaches the others as `notifications_failing` (detectors.delivery).
        outbox.on_lost = lambda lost: self.state.put(LOST, lost, at=lost.at)
        engine = AlertEngine(config, store, outbox, DeadMan(config.alerting), snapshots)
        outbox.start()
        self.runtime.outbox = outbox
        return engine

    @property
    def config(self) -> Config:
        return self.runtime.config

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self, trigger: Optional[Union[str, AbstractSet[str]]] = None, fresh_within: float = 0.0,
                 periodic: bool = False) -> None:
        """One detector pass over a consistent view, handed to the engine: all detectors, or after
        a probe's round (`trigger`) those that probe feeds and every answer older than
        `fresh_within`. A `periodic` pass that would change nothing is skipped (`_needless`)."""
        with self._eval_lock:
            if periodic:
                self.idle = self._needless()
                if self.idle:
                    self.periodic_skipped += 1
                    return
            self.passes += 1
            config = self.config
            view = self.detectors.prepare(self.state.view(), config)
            findings, errors = self.detectors.run(view, config, trigger, fresh_within)
            if errors:
                self.runtime.bump("detector_errors")
            self.runtime.detector_errors = errors
            self.runtime.publish(evaluated_metrics(view, config))
            self.engine.process(findings, view.now, blind_rules(view))
            self.idle = self.idle and not findings

    def _needless(self) -> bool:
        """A periodic pass is needless while nothing is found and every answer is less than
        SKIP_WITHIN old: the rounds' passes keep the answers that recent, the engine would be
        handed the empty answer it already has, and its own timer keeps the alerts' times.
        While anything is found, every tick runs (holds, resolves: as before SKIP_WITHIN)."""
        return self.detectors.all_fresh(clock.now(), SKIP_WITHIN) and not self.detectors.last_findings()

    def _after_round(self, probes: FrozenSet[str]) -> None:
        """A detector pass for a batch of rounds that finished together (see ProbeScheduler._gather)."""
        if not self.stopping:
            self.evaluate(probes, fresh_within=FRESH_WITHIN)

    def _after_complete_round(self) -> None:  # every probe finished a round: the dead-man ping
        if not self.stopping:
            self.engine.round_complete()

    def _periodic(self) -> None:
        # Time-based conditions (a heartbeat going stale) must be seen even between probe rounds;
        # the margin only skips a coalesced double fire.
        now = time.monotonic()
        if now - self._last_periodic_eval >= FRESH_WITHIN and not self.stopping:
            self._last_periodic_eval = now
            # Detectors that a probe round ran moments ago keep that answer (a pass at 64 ranks
            # costs milliseconds; the rounds of three probes already run liveness every few s).
            self.evaluate(fresh_within=FRESH_WITHIN, periodic=True)

    # -- status (watchdog.wiring.status, .health) -------------------------------------------
    def status(self) -> Dict[str, Any]:
        return build_status(self.runtime, self.engine, self.scheduler.next_runs())

    def healthy(self) -> Tuple[bool, str]:
        live = Liveness(self.stopping, self._loop_beat, self.ready, self.scheduler.completing_rounds)
        return health(live, self.state.statuses, self.engine.storage_health)

    def status_line(self) -> str:
        return status_line(self.runtime, self.engine)

    # -- reload (watchdog.wiring.reload) ---------------------------------------------------
    def _build_probes(self, config: Config) -> List[Probe]:
        self.feed.opts = scan_options(config)
        return build_probes(ProbeContext(config=config, state_dir=config.paths.state_dir, feed=self.feed))

    def start_reload(self) -> None:
        """Read and validate the config in a thread, so a hostile file never wedges the main loop."""
        self.reloader.start()

    def _apply_reload(self, result: Outcome) -> bool:
        """Swap the new config in whole (config, engine, probes), or report why it was rejected."""
        if isinstance(result, BaseException):
            self.reloader.reject(result)
            return False
        new, old = result.config, self.config
        later = restart_only_changes(old, new)
        if later:
            log.warning("reload: %s changed; %s at the next restart (everything else applies now)",
                        ", ".join(later), "takes effect" if len(later) == 1 else "take effect")
        set_level(new.logging.level)
        redact_with(Redactor(config_secrets(new)).known)
        self.runtime.config = new
        self.runtime.config_loaded_at = clock.now()
        self.engine.reconfigure(new)
        self.detectors.reconfigured()
        self.scheduler.replace_probes(result.probes, new.probes.default_timeout, new.probes.jitter)
        self.runtime.bump("reload_success")
        log.info("config reloaded from %s: %d probes", self.config_path, len(result.probes))
        report_setup(new)
        self.notifier.ready(self.status_line())
        return True

    # -- lifecycle -------------------------------------------------------------------------
    def _start_http(self, config: Config, registry: MetricsSource, quiet: bool = False) -> bool:
        def attach(http: HttpEndpoint) -> None:
            self.http = self.runtime.http = http

        with self._http_lock:
            if self.stopping:  # a late attempt of ListenLater: nothing to serve any more
                return True
            return start_http(config, registry, self.status, self.healthy, attach=attach, quiet=quiet,
                              status_remote=lambda: bool(self.runtime.config.http.status_remote)) is not None

    def run(self) -> int:
        install_signal_handlers(self.signals)  # first: see its docstring
        config = self.config
        probes = self._build_probes(config)
        registry = make_registry(self.runtime)
        if config.http.enabled and not self._start_http(config, registry):
            self.listen_later = ListenLater(config.http.listen, lambda: self._start_http(config, registry, quiet=True))
            self.listen_later.start()
        self.scheduler.start(probes)
        log.info("npu-watchdog %s started: host=%s training_job=%s probes=%s", __version__, config.node.name,
                 config.job_label or "(discovered per job)", ",".join(p.name for p in probes) or "(none)")
        report_setup(config)
        # READY=1 after the first round of every probe (bounded by the longest probe timeout).
        first_budget = max([self.scheduler.timeout_of(p) for p in probes] + [1.0]) + 2.0
        ready_deadline = time.monotonic() + first_budget
        alive = KeepAlive(self.notifier, watchdog_interval(), self.scheduler.completing_rounds, self.status_line)
        try:
            while self._turn(alive, ready_deadline):
                pass
        finally:
            self.stop()
        return 0

    def _turn(self, alive: KeepAlive, ready_deadline: float) -> bool:
        """One turn of the main loop; False when a stop signal came."""
        try:
            # A signal wakes this at once; the timeout paces READY/ping/STATUS checks: 1 s until
            # ready, then a turn just after the tick's on the grid (a wake-up of its own costs CPU).
            signum = self.signals.get(timeout=self.scheduler.until_beat(alive.wait(self.scheduler.tick_period))
                                      if self.ready else 1.0)
        except queue.Empty:
            signum = None
        if signum in STOP_SIGNALS:
            log.info("received %s, stopping", signal.Signals(signum).name)
            return False
        if signum == signal.SIGHUP:
            log.info("received SIGHUP, reloading %s", self.config_path)
            self.start_reload()
        elif signum == RELOAD_READY:
            try:
                for outcome in self.reloader.outcomes():
                    self._apply_reload(outcome)
            except Exception:
                log.exception("applying the reloaded config failed")
        now = time.monotonic()
        self._loop_beat = now
        self.scheduler.clock_follower.follow()
        self.reloader.check_time(now)
        self._check_state_folder()
        if not self.ready and (self.scheduler.wait_first_round(0) or now >= ready_deadline):
            self._become_ready()
        if self.ready:
            alive.turn(now)
            self.scheduler.tick_every(IDLE_TICK_SECONDS if self.idle else TICK_SECONDS)
        return True

    def _become_ready(self) -> None:
        try:
            self.evaluate()
        except Exception:  # like the scheduler's passes: reported, never the daemon's end
            log.exception("the first evaluation failed")
        self.ready = True
        self.notifier.ready(self.status_line())
        log.info("first probe round complete: %s", self.status_line())
        # What start-up made (modules, config, the first rounds) lives as long as the
        # daemon: keep the cyclic collector from walking it again in every full pass.
        gc.collect()
        gc.freeze()

    def _check_state_folder(self) -> None:
        """A state folder deleted under the daemon is re-created (the engine copies its open
        database there) and the folder's lock taken again, so no second daemon can start on it."""
        try:
            self.engine.check_storage()
            self.state_folder.check()
        except (OSError, statelock.StateFolderBusy) as exc:  # retried at the next turn
            log.debug("state folder check: %s", exc)

    def stop(self) -> None:
        with self._http_lock:
            self.stopping = True
        if self.listen_later is not None:
            self.listen_later.stop.set()
        self.notifier.stopping()
        shut_down(self.scheduler, self.http, self.engine, self.runtime.snapshots)

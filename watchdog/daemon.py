"""Wiring and the main loop of `npu-watchdog run`.

Signal handlers only queue the signal; the main loop acts on it (reload, stop), feeds the systemd
watchdog only while rounds really complete, and keeps STATUS= current.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import signal
import threading
import time
from typing import AbstractSet, Any, Dict, FrozenSet, List, Optional, Tuple, Union

from watchdog import __version__
from watchdog.service import fdbudget, statelock
from watchdog.alerting.engine import build_engine
from watchdog.config import Config, ConfigError, load_config
from watchdog.config.pathcheck import unmatched_paths
from watchdog.detectors import IncrementalDetectors, load_detectors
from watchdog.core.findings import JOB_LABEL
from watchdog.discovery.feed import feed_for, scan_options
from watchdog.discovery.status import discovery_status
from watchdog.parse.flight_recorder import public_record
from watchdog.http.server import HttpEndpoint
from watchdog.logrules.matcher import SLOW_ENGINE_ADVICE, effective_engine
from watchdog.service.logsetup import set_level
from watchdog.service.malloc import TRIM_SECONDS, trim
from watchdog.metrics.collector import evaluated_metrics, make_registry
from watchdog.probes import ProbeContext, build_probes
from watchdog.runtime import Runtime
from watchdog.scheduler import TICK_SECONDS, ProbeScheduler
from watchdog.host import subproc
from watchdog.snapshots import build_snapshot_taker
from watchdog.service.sdnotify import Notifier, watchdog_interval
from watchdog.core.state import StateStore

log = logging.getLogger("watchdog.daemon")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Put on the signal queue by the reload thread when its result is ready (not a real signal).
RELOAD_READY = -1
#: A reload (read, validate, build probes) that takes longer is abandoned: the running config stays.
#: The loader's own limits (watchdog/config/yamlsafe.py) bound its memory; this bounds its time.
RELOAD_TIMEOUT_SECONDS = 10.0
#: /healthz turns 503 when the main loop has not turned for this long (it turns at least every 5 s).
LOOP_STALL_SECONDS = 15.0
#: Samples the state store keeps per probe: only until the detector runner has folded them into
#: its summaries (a pass runs at least every few seconds), which remember `probes.history`. An
#: hour of raw samples was most of the daemon's memory growth (~30 MB at 64 ranks). With discovery
#: each job's summaries are fed the same way (watchdog.detectors.jobs.JobSummaries).
RETAIN_SECONDS = 120.0
#: A detector that ran this recently keeps its answer in a periodic pass (the tick comes every
#: TICK_SECONDS; the margin only skips a coalesced double fire).
FRESH_WITHIN = 0.8 * TICK_SECONDS
#: How late a periodic tick may come (a busy scheduler): a round's pass judges freshness this
#: much after the tick's nominal time.
TICK_LATENESS = 0.5
#: Queued (like a signal) when every probe has finished its first round, so READY=1 goes out at
#: once instead of at the main loop's next wake-up.
FIRST_ROUND = -2


def ensure_private_dir(path: str) -> None:
    """Create a directory the daemon writes to, owner-only (0700)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        os.chmod(path, 0o700)
    except OSError as exc:  # not ours, or read-only: writes there report themselves
        log.warning("cannot tighten permissions of %s: %s", path, exc.strerror or exc)


class Daemon:
    def __init__(self, config: Config, config_path: Optional[str]):
        self.config_path = config_path
        ensure_private_dir(config.paths.state_dir)
        # Before anything opens the state (raises StateFolderBusy when another daemon holds it).
        self._state_lock = statelock.acquire(config.paths.state_dir)
        self.state = StateStore(history_seconds=RETAIN_SECONDS)
        self.runtime = Runtime(config=config, state=self.state, engine=None, config_path=config_path)
        self.runtime.started_at = self.state.started_at
        # Optional services first: the engine links alerts to snapshots through the runtime.
        snapshots = build_snapshot_taker(config, self.runtime)
        if snapshots is not None:
            self.runtime.services["snapshots"] = snapshots
        self.engine = build_engine(config, self.runtime)
        # One discovery result shared by the probes it feeds (kept across reloads).
        self.feed = feed_for(config)
        self.runtime.services["discovery"] = self.feed
        self.runtime.engine = self.engine
        self.detectors = IncrementalDetectors(load_detectors())
        self._eval_lock = threading.Lock()
        self.signals: "queue.Queue[int]" = queue.Queue()
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
        self._last_periodic_eval = 0.0
        #: Detector passes run, and periodic ones skipped as needless (tests count them).
        self.passes = 0
        self.periodic_skipped = 0
        self.stopping = False
        #: Reloads run in a thread: generation of the one in flight (results of others are dropped).
        self._reload_gen = 0
        self._reload_started: Optional[float] = None
        self._reload_results: "queue.Queue[Tuple[int, Any]]" = queue.Queue()
        self._loop_beat = time.monotonic()

    @property
    def config(self) -> Config:
        return self.runtime.config

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self, trigger: Optional[Union[str, AbstractSet[str]]] = None, fresh_within: float = 0.0, periodic: bool = False,
                 next_check: Optional[float] = None) -> None:
        """One detector pass over a consistent view, handed to the engine: all detectors, or after
        a probe's round (`trigger`) those that probe feeds (and, see `IncrementalDetectors.run`,
        those the periodic pass due at `next_check` would run). A `periodic` pass that would
        change nothing is skipped (see `_needless`)."""
        with self._eval_lock:
            if periodic and self._needless(fresh_within):
                self.periodic_skipped += 1
                return
            self.passes += 1
            config = self.config
            view = self.detectors.prepare(self.state.view(), config)
            findings, errors = self.detectors.run(view, config, trigger, fresh_within, next_check)
            if errors:
                self.runtime.bump("detector_errors")
            self.runtime.detector_errors = errors
            self.runtime.publish(evaluated_metrics(view, config))
            self.engine.process(findings, view.now)

    def _needless(self, fresh_within: float) -> bool:
        """A periodic pass is needless when every detector ran within `fresh_within` (the pass
        would run none of those with trigger lists) and found nothing: the engine would be handed
        the empty answer it already has, and its own timer keeps the alerts' times. Checked
        before building a view: at idle this skips about half of the periodic passes."""
        return self.detectors.all_fresh(time.time(), fresh_within) and not self.detectors.last_findings()

    def _after_round(self, probes: FrozenSet[str]) -> None:
        """A detector pass for a batch of rounds that finished together (see ProbeScheduler._gather)."""
        if not self.stopping:
            self.evaluate(probes, fresh_within=FRESH_WITHIN, next_check=self._next_check())

    def _next_check(self) -> Optional[float]:
        """The (wall-clock) time of the next periodic pass when it is less than FRESH_WITHIN
        away: what a round's pass runs then spares that pass (probe rounds come in bursts every
        10 s, periodic passes every 5 s, so every other one is spared at idle)."""
        ahead = self._last_periodic_eval + TICK_SECONDS - time.monotonic()
        return time.time() + ahead + TICK_LATENESS if 0 <= ahead < FRESH_WITHIN else None

    def _after_complete_round(self) -> None:
        # Every probe finished a round: the alerting dead-man ping (if configured) goes out.
        hook = getattr(self.engine, "round_complete", None)
        if hook is not None and not self.stopping:
            hook()

    def _periodic(self) -> None:
        # Time-based conditions (a heartbeat going stale) must be seen even between probe rounds.
        # The tick comes every TICK_SECONDS; the margin only skips a coalesced double fire.
        now = time.monotonic()
        if now - self._last_periodic_eval >= FRESH_WITHIN and not self.stopping:
            self._last_periodic_eval = now
            # Detectors that a probe round ran moments ago keep that answer (a pass at 64 ranks
            # costs milliseconds; the rounds of three probes already run liveness every few s).
            self.evaluate(fresh_within=FRESH_WITHIN, periodic=True)

    # -- status ----------------------------------------------------------------------------
    def status(self) -> Dict[str, Any]:
        nexts = self.scheduler.next_runs()
        probes = []
        for st in self.state.statuses():
            probes.append({
                "name": st.name, "up": st.up, "interval_seconds": st.interval, "runs_total": st.runs_total,
                "errors_total": st.errors_total, "timeouts_total": st.timeouts_total, "hung": st.hung,
                "last_run": st.last_run, "last_success": st.last_success, "last_duration_seconds": st.last_duration,
                "next_run": nexts.get(st.name), "last_result": st.last_result, "last_error": st.last_error,
            })
        return {
            "version": __version__, "pid": os.getpid(), "host": self.config.node.name, JOB_LABEL: self.config.job_label,
            "started_at": self.runtime.started_at, "config_path": self.config_path,
            "config_loaded_at": self.runtime.config_loaded_at,
            "probes": probes,
            "log_engine": effective_engine(self.config.probes.logs.engine),
            "findings": [f.to_dict() for f in self.engine.current()],
            "detector_errors": list(self.runtime.detector_errors),
            "flight_recorder": self._flight_recorder_tails(),
            "discovery": discovery_status(self.config, self.feed),
        }

    def _flight_recorder_tails(self) -> List[Dict[str, Any]]:
        """The newest steps of each rank's flight recorder, as the heartbeat probe last read them."""
        sample = self.state.view().latest("heartbeat")
        readings = getattr(getattr(sample, "value", None), "readings", ())
        return [{"rank": r.rank, "path": r.path, "records": [public_record(x) for x in r.flight_tail],
                 "error": r.flight_error} for r in readings if r.flight_tail or r.flight_error]

    def healthy(self) -> Tuple[bool, str]:
        if self.stopping:
            return False, "stopping"
        stalled = time.monotonic() - self._loop_beat
        if stalled > LOOP_STALL_SECONDS:
            return False, f"main loop has not turned for {stalled:.0f}s"
        if not self.ready:
            return False, "starting: the first probe round has not completed"
        if not self.scheduler.completing_rounds():
            return False, "scheduler is not completing rounds"
        notes = []
        down = [s.name for s in self.state.statuses() if not s.up and s.runs_total > 0]
        if down:
            notes.append("probes down: " + ", ".join(sorted(down)))
        # Still watching (200), but new alerts wait: said here so a health check shows it.
        storage = self.engine.storage_health() if hasattr(self.engine, "storage_health") else None
        if storage is not None and not storage.writable:
            notes.append(f"state folder not writable for {max(0.0, time.time() - (storage.since or 0)):.0f}s "
                         f"({storage.error}); new alerts are held until it is")
        return True, "ok" + (" (" + "; ".join(notes) + ")" if notes else "")

    def status_line(self) -> str:
        sts = self.state.statuses()
        up = sum(1 for s in sts if s.up)
        findings = self.engine.current()
        crit = sum(1 for f in findings if f.severity == "critical")
        job = self.config.job_label or "(discovered per job)"
        return f"{up}/{len(sts)} probes up, {len(findings)} findings ({crit} critical), job {job}"

    # -- lifecycle -------------------------------------------------------------------------
    def _build_probes(self, config: Config) -> List[Any]:
        self.feed.opts = scan_options(config)
        return build_probes(ProbeContext(config=config, state_dir=config.paths.state_dir, feed=self.feed))

    def _install_signal_handlers(self) -> None:
        def enqueue(signum: int, _frame: Any) -> None:
            self.signals.put(signum)

        for sig in STOP_SIGNALS + (signal.SIGHUP,):
            signal.signal(sig, enqueue)

    @staticmethod
    def _report_setup(config: Config) -> None:
        """Say at start and on reload what would otherwise fail in silence: the slow log engine,
        configured paths that match nothing (the `path_unmatched` finding follows after start_grace)."""
        engine = effective_engine(config.probes.logs.engine)
        if config.probes.logs.enabled and engine == "re":
            log.warning(SLOW_ENGINE_ADVICE)
        else:
            log.info("log rules run on the %s engine", engine)
        for line in unmatched_paths(config):
            log.warning("config: %s", line)

    def start_reload(self) -> None:
        """Read and validate the config in a thread, so a hostile file never wedges the main loop.

        The main loop applies the result when it arrives (RELOAD_READY) or gives up after
        RELOAD_TIMEOUT_SECONDS; a SIGHUP during a reload starts a newer one and the older result is
        dropped.
        """
        self.notifier.reloading()
        self._reload_gen += 1
        gen = self._reload_gen
        self._reload_started = time.monotonic()

        def work() -> None:
            self._reload_results.put((gen, self._prepare_reload()))
            self.signals.put(RELOAD_READY)

        threading.Thread(target=work, name="config-reload", daemon=True).start()

    def _reload_ready(self) -> None:
        while True:
            try:
                gen, result = self._reload_results.get_nowait()
            except queue.Empty:
                return
            if gen == self._reload_gen and self._reload_started is not None:
                self._reload_started = None
                self._apply_reload(result)

    def _check_reload_time(self, now: float) -> None:
        if self._reload_started is None or now - self._reload_started < RELOAD_TIMEOUT_SECONDS:
            return
        self._reload_started = None
        self._reload_gen += 1  # its result, if it ever comes, is dropped
        self.runtime.bump("reload_failure")
        log.error("reload of %s did not finish within %gs; keeping the running config",
                  self.config_path, RELOAD_TIMEOUT_SECONDS)
        self.notifier.ready("reload timed out; " + self.status_line())

    def _prepare_reload(self) -> Any:
        """The new config and its probes, or the exception that rejects them."""
        try:
            new = load_config(self.config_path)
            if new.paths.state_dir != self.config.paths.state_dir:
                log.warning("paths.state_dir changed: takes effect at the next restart")
            new.paths = self.config.paths  # the running state (and a --state-dir override) stays
            return new, self._build_probes(new)
        except Exception as exc:  # reported by _apply_reload; the running config stays
            return exc

    def _apply_reload(self, result: Any) -> bool:
        if isinstance(result, ConfigError):
            self.runtime.bump("reload_failure")
            log.error("reload rejected, keeping the running config:\n%s", result.render())
            self.notifier.ready(f"reload rejected ({len(result.errors)} errors); " + self.status_line())
            return False
        if isinstance(result, BaseException):
            self.runtime.bump("reload_failure")
            log.error("reload rejected, keeping the running config: %s: %s", type(result).__name__, result)
            self.notifier.ready("reload rejected; " + self.status_line())
            return False
        new, probes = result
        old = self.config
        if new.http.listen != old.http.listen:
            log.warning("http.listen changed (%s -> %s): takes effect at the next restart",
                        old.http.listen, new.http.listen)
        set_level(new.logging.level)
        self.runtime.config = new
        self.runtime.config_loaded_at = time.time()
        self.engine.reconfigure(new)
        self.scheduler.replace_probes(probes, new.probes.default_timeout, new.probes.jitter)
        self.runtime.bump("reload_success")
        log.info("config reloaded from %s: %d probes", self.config_path, len(probes))
        self._report_setup(new)
        self.notifier.ready(self.status_line())
        return True

    def _start_http(self, config: Config, registry: object) -> bool:
        """Listen with a connection cap that leaves the probes their descriptors (fdbudget)."""
        soft = fdbudget.raise_soft_limit()
        cap = fdbudget.connection_cap(config.http.max_connections, soft, fdbudget.open_fds())
        try:
            self.http = HttpEndpoint(config.http.host, config.http.port, registry, self.status, self.healthy,
                                     max_connections=cap, connection_timeout=config.http.connection_timeout,
                                     status_remote=lambda: bool(self.runtime.config.http.status_remote))
        except OSError as exc:
            log.error("cannot listen on %s: %s", config.http.listen, exc.strerror or exc)
            return False
        self.runtime.services["http"] = self.http
        self.http.start()
        log.info("serving /metrics on http://%s:%d/ (at most %d connections; open-files limit %d, %d kept for probes)",
                 config.http.host, self.http.port, cap, soft, fdbudget.PROBE_RESERVE)
        return True

    def run(self) -> int:
        config = self.config
        probes = self._build_probes(config)
        registry = make_registry(self.runtime)
        if config.http.enabled:
            if not self._start_http(config, registry):
                return 1
        self._install_signal_handlers()
        self.scheduler.start(probes)
        log.info("npu-watchdog %s started: host=%s training_job=%s probes=%s", __version__, config.node.name,
                 config.job_label or "(discovered per job)", ",".join(p.name for p in probes) or "(none)")
        self._report_setup(config)
        # READY=1 after the first round of every probe (bounded by the longest probe timeout).
        first_budget = max([self.scheduler.timeout_of(p) for p in probes] + [1.0]) + 2.0
        ready_deadline = time.monotonic() + first_budget
        ping_every = watchdog_interval()
        # Main-loop pace once ready: fast enough for the systemd watchdog ping and the 10 s STATUS
        # line, else idle (READY and signals wake it at once); 1 s until READY's deadline.
        loop_wait = min(5.0, ping_every / 2) if ping_every else 5.0
        last_ping = 0.0
        last_status = 0.0
        last_trim = float("-inf")  # freed heap pages go back once ready, then every TRIM_SECONDS
        exit_code = 0
        try:
            while True:
                try:
                    # A queued signal wakes this at once; the timeout only paces READY/ping/STATUS
                    # checks, and each wake-up costs CPU at idle (bench/bench_footprint.py).
                    signum = self.signals.get(timeout=loop_wait if self.ready else min(loop_wait, 1.0))
                except queue.Empty:
                    signum = None
                if signum in STOP_SIGNALS:
                    log.info("received %s, stopping", signal.Signals(signum).name)
                    break
                if signum == signal.SIGHUP:
                    log.info("received SIGHUP, reloading %s", self.config_path)
                    self.start_reload()
                elif signum == RELOAD_READY:
                    try:
                        self._reload_ready()
                    except Exception:
                        log.exception("applying the reloaded config failed")
                now = time.monotonic()
                self._loop_beat = now
                self._check_reload_time(now)
                self._check_state_folder()
                if not self.ready and (self.scheduler.wait_first_round(0) or now >= ready_deadline):
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
                ready = self.ready
                if ready and ping_every and now - last_ping >= ping_every:
                    if self.scheduler.completing_rounds():
                        self.notifier.watchdog()
                        last_ping = now
                    else:
                        log.error("probe rounds are not completing; withholding the systemd watchdog ping")
                        last_ping = now
                if ready and now - last_trim >= TRIM_SECONDS:
                    trim()
                    last_trim = now
                if ready and now - last_status >= 10:
                    self.notifier.status(self.status_line())
                    last_status = now
        finally:
            self.stop()
        return exit_code

    def _check_state_folder(self) -> None:
        """A state folder deleted under the daemon is re-created (the engine copies its open
        database there) and the folder's lock taken again, so no second daemon can start on it."""
        state_dir = self.config.paths.state_dir
        try:
            check = getattr(self.engine, "check_storage", None)
            if check is not None:
                check()
            if not statelock.held(self._state_lock, state_dir):
                ensure_private_dir(state_dir)
                fd = statelock.acquire(state_dir)
                os.close(self._state_lock)
                self._state_lock = fd
                log.warning("the lock of the state folder %s was deleted; taken again", state_dir)
        except (OSError, statelock.StateFolderBusy) as exc:  # retried at the next turn
            log.debug("state folder check: %s", exc)

    def stop(self) -> None:
        self.stopping = True
        self.notifier.stopping()
        snapshots = self.runtime.services.get("snapshots")
        if snapshots is not None:
            snapshots.cancel()  # captures wind down while the rest stops (joined below)
        self.scheduler.shutdown()
        if self.http is not None:
            self.http.stop()
        try:
            self.engine.close()
        except Exception:
            log.exception("closing the alert engine failed")
        if snapshots is not None:
            try:
                snapshots.close()
            except Exception:
                log.exception("closing the snapshot taker failed")
        # Last: commands still running (an abandoned round, a capture's hung npu-smi) are in their
        # own sessions, so nothing else would end them.
        killed = subproc.kill_all()
        if killed:
            log.info("stopped %d running command(s) with their process groups", killed)
        log.info("stopped")

"""The snapshot taker: admission (policy, rate limit, concurrency, disk floor), capture, archive.

`request()` decides synchronously and cheaply (it runs on the engine's thread) and returns the
final archive path at once; the capture runs in a background thread within its time budget. The
archive appears under its final name only when complete, so the path an alert names either exists
and is whole, or does not exist yet.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import functools
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from watchdog import __version__
from watchdog.core.findings import JOB_LABEL, Finding
from watchdog.runtime import Runtime
import watchdog.snapshots.collect as collect
import watchdog.snapshots.flight as flight
import watchdog.snapshots.procs as procs
from watchdog.snapshots.bundle import Bundle, Item, Task, run_tasks, write_archive
from watchdog.snapshots.context import CaptureContext
from watchdog.snapshots.policy import Cooldown, min_interval, wants_snapshot
from watchdog.privacy.redact import Cancelled, Redactor, config_secrets
from watchdog.snapshots.retention import apply_retention, disk_bytes, free_bytes

log = logging.getLogger("watchdog.snapshots")

RESULTS = ("taken", "failed", "skipped")
#: Why a wanted snapshot was not taken (the label values of npu_watchdog_snapshots_skipped_total).
SKIP_REASONS = ("rate_limited", "low_disk", "busy", "unavailable")
MANUAL_RULE = "manual"
#: How long stopping the daemon waits for a running capture to write what it has (the unit's stop
#: timeout is far longer; five seconds is the promise in docs/guarantees.md).
STOP_GRACE_SECONDS = 3.0


def manual_finding(config: Any, reason: str = "") -> Finding:
    """The pseudo-finding of an on-demand snapshot."""
    return Finding(rule=MANUAL_RULE, severity="info", summary=reason or "snapshot taken on demand",
                   labels=dict(config.base_labels), snapshot=True, details={"reason": reason})


@dataclass
class Admission:
    path: Optional[str]
    skipped: Optional[str] = None
    message: str = ""


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "x"


class SnapshotTaker:
    def __init__(self, config: Any, runtime: Optional[Runtime] = None):
        self._config = config
        self.runtime = runtime
        self._lock = threading.Lock()
        self._running = 0
        self._threads: List[threading.Thread] = []
        self._reserved: Set[str] = set()
        #: (rule, job) -> the path of the last snapshot taken for it (named by rate-limited alerts).
        self._recent: Dict[Tuple[str, str], str] = {}
        self._closed = False
        #: Set when the daemon stops: captures stop collecting and redacting, and write what they have.
        self._cancel = threading.Event()
        self.cooldown = Cooldown()
        self.results: Dict[str, int] = {r: 0 for r in RESULTS}
        self.skipped: Dict[str, int] = {r: 0 for r in SKIP_REASONS}
        self.last_duration = 0.0
        self.disk_bytes = 0
        try:
            self._prepare_dir()
            apply_retention(self.directory, self.scfg.keep, self.scfg.max_total_size, self.scfg.max_age)
            self.disk_bytes = disk_bytes(self.directory)
        except OSError as exc:
            log.error("snapshot directory %s is not usable: %s", self.directory, exc.strerror or exc)

    # -- config (follows reloads through the runtime) --
    @property
    def config(self) -> Any:
        return self.runtime.config if self.runtime is not None else self._config

    @property
    def scfg(self) -> Any:
        return self.config.snapshots

    @property
    def directory(self) -> str:
        return str(self.config.paths.snapshot_dir)

    def _prepare_dir(self) -> None:
        os.makedirs(self.directory, mode=self.scfg.dir_mode, exist_ok=True)
        try:
            os.chmod(self.directory, self.scfg.dir_mode)
        except PermissionError:
            log.warning("cannot set permissions of %s", self.directory)

    # -- the contract ---------------------------------------------------------------------------
    def request(self, finding: Finding, extra_pids: Iterable[int] = ()) -> Optional[str]:
        """Start a snapshot for `finding` if policy allows; the future archive path, or None."""
        try:
            if not wants_snapshot(finding, self.scfg):
                return None
            adm = self._admit(finding, force=False)
            if adm.path is None:
                if adm.skipped in ("rate_limited", "busy"):
                    # Same rule and job moments ago (or still being captured): that archive is
                    # this incident's evidence; None when there is none.
                    with self._lock:
                        return self._recent.get((finding.rule, finding.labels.get(JOB_LABEL, "")))
                return None
            with self._lock:
                self._recent[(finding.rule, finding.labels.get(JOB_LABEL, ""))] = adm.path
            t = threading.Thread(target=self._capture_safely, args=(adm.path, finding, tuple(extra_pids)),
                                 name=f"snapshot-{finding.rule}", daemon=True)
            with self._lock:
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()
            return adm.path
        except Exception:
            log.exception("snapshot request for %s failed", finding.rule)
            self._count_skip("unavailable")
            return None

    def take(self, finding: Finding, extra_pids: Iterable[int] = ()) -> Admission:
        """Capture synchronously, bypassing policy and rate limit (the on-demand command)."""
        adm = self._admit(finding, force=True)
        if adm.path is not None:
            if not self._capture_safely(adm.path, finding, tuple(extra_pids)):
                return Admission(None, "failed", "the archive could not be written (see the log)")
        return adm

    def cancel(self) -> None:
        """Stop admitting and tell running captures to finish now (returns at once)."""
        with self._lock:
            self._closed = True
        self._cancel.set()

    def close(self) -> None:
        """Stop admitting; running captures stop where they are and write a partial archive whose
        manifest lists what was skipped (stopping never waits for a whole capture budget)."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        self._cancel.set()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def stats(self) -> Dict[str, Any]:
        with self._lock:
            return {"results": dict(self.results), "skipped": dict(self.skipped),
                    "disk_bytes": self.disk_bytes, "last_duration": self.last_duration,
                    "running": self._running}

    # -- admission ------------------------------------------------------------------------------
    def _count_skip(self, reason: str) -> None:
        with self._lock:
            self.results["skipped"] += 1
            self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def _skip(self, finding: Finding, reason: str, message: str) -> Admission:
        self._count_skip(reason)
        level = logging.INFO if reason == "rate_limited" else logging.WARNING
        log.log(level, "snapshot for %s skipped (%s): %s", finding.rule, reason, message,
                extra={"event": "snapshot_skipped", "reason": reason, "rule": finding.rule})
        return Admission(None, reason, message)

    def _admit(self, finding: Finding, force: bool) -> Admission:
        scfg = self.scfg
        now = time.monotonic()
        with self._lock:
            if self._closed:
                return Admission(None, "unavailable", "the daemon is stopping")
            busy = self._running >= scfg.max_concurrent
        if busy:
            return self._skip(finding, "busy", f"{scfg.max_concurrent} snapshots are already being captured")
        interval = min_interval(finding, scfg)
        if not force and not self.cooldown.allow(finding, interval, now, commit=False):
            return self._skip(finding, "rate_limited",
                              f"one was taken for this rule and job less than {interval:g}s ago")
        try:
            self._prepare_dir()
            apply_retention(self.directory, scfg.keep, scfg.max_total_size, scfg.max_age)
            free = free_bytes(self.directory)
        except OSError as exc:
            return self._skip(finding, "unavailable", f"snapshot directory {self.directory}: {exc.strerror or exc}")
        if free < scfg.min_free_space:
            return self._skip(finding, "low_disk",
                              f"{free} bytes free on the filesystem of {self.directory}, "
                              f"below the floor snapshots.min_free_space={scfg.min_free_space}")
        with self._lock:
            if self._closed:
                return Admission(None, "unavailable", "the daemon is stopping")
            if self._running >= scfg.max_concurrent:
                busy = True
            else:
                if not force:
                    self.cooldown.allow(finding, interval, now, commit=True)
                self._running += 1
                path = self._reserve_path(finding)
        if busy:
            return self._skip(finding, "busy", f"{scfg.max_concurrent} snapshots are already being captured")
        return Admission(path)

    def _reserve_path(self, finding: Finding) -> str:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        base = f"{stamp}-{_safe(self.config.node.name)}-{_safe(finding.rule)}"
        n = 1
        while True:
            name = base + (f"-{n}" if n > 1 else "") + ".tar.gz"
            path = os.path.join(self.directory, name)
            if path not in self._reserved and not os.path.exists(path):
                self._reserved.add(path)
                return path
            n += 1

    # -- capture --------------------------------------------------------------------------------
    def _capture_safely(self, path: str, finding: Finding, extra_pids: tuple) -> bool:
        t0 = time.monotonic()
        ok = False
        try:
            manifest, size = self._capture(path, finding, extra_pids)
            ok = True
            log.warning("snapshot %s written (%d bytes, %.1fs%s)", path, size, time.monotonic() - t0,
                        "" if manifest["complete"] else "; incomplete: " + ", ".join(
                            manifest["missing"] + [s["file"] for s in manifest.get("skipped_files", [])]),
                        extra={"event": "snapshot_taken", "path": path, "rule": finding.rule})
        except Exception as exc:
            log.error("snapshot %s failed: %s: %s", path, type(exc).__name__, getattr(exc, "strerror", None) or exc)
        finally:
            duration = time.monotonic() - t0
            try:
                apply_retention(self.directory, self.scfg.keep, self.scfg.max_total_size, self.scfg.max_age,
                                protect=path if ok else None)
                on_disk = disk_bytes(self.directory)
            except OSError:
                on_disk = self.disk_bytes
            with self._lock:
                self._running -= 1
                self._reserved.discard(path)
                self.results["taken" if ok else "failed"] += 1
                self.last_duration = duration
                self.disk_bytes = on_disk
        return ok

    def _tasks(self, ctx: CaptureContext) -> List[Task]:
        tasks = [
            Task("npu-smi", lambda it: collect.collect_npu_smi(ctx, it)),
            Task("stacks:kernel", lambda it: procs.collect_kernel_stacks(ctx, it)),
        ]
        for rec in procs.stack_targets(ctx):
            tasks.append(Task(f"stacks:py-spy:{rec.pid}", functools.partial(procs.py_spy_task, ctx, rec)))
        tasks += [
            Task("environment", lambda it: procs.collect_environment(ctx, it)),
            Task("plog", lambda it: procs.collect_plogs(ctx, it)),
        ]
        tasks += [Task(name, fn) for name, fn in collect.log_tasks(ctx)]

        def versions(it: Item) -> None:
            collect.collect_version_files(ctx, it)
            procs.torch_versions(ctx, it)

        tasks += [
            Task("heartbeat", lambda it: collect.collect_heartbeats(ctx, it)),
            Task("flight-recorder", lambda it: flight.collect_flight_recorders(ctx, it)),
            Task("versions", versions),
            Task("daemon", lambda it: collect.collect_findings(ctx, it)),
            Task("dmesg", lambda it: collect.collect_dmesg(ctx, it)),
        ]
        return tasks

    def _capture(self, path: str, finding: Finding, extra_pids: tuple) -> tuple:
        config = self.config
        scfg = config.snapshots
        started = time.time()
        t0 = time.monotonic()
        bundle = Bundle()
        ctx = CaptureContext(config=config, runtime=self.runtime, bundle=bundle, deadline=t0 + scfg.budget,
                             roots=procs.job_roots(self.runtime, extra_pids))
        items = run_tasks([Task("processes", lambda it: procs.collect_tree(ctx, it))], ctx.deadline, 1,
                          self._cancel)
        items += run_tasks(self._tasks(ctx), ctx.deadline, scfg.workers, self._cancel)
        files, found_secrets = bundle.seal()
        missing = [i.name for i in items if i.status == "missing"]
        top = os.path.basename(path)[: -len(".tar.gz")]
        manifest = {
            "format": 1,
            "archive": os.path.basename(path),
            "trigger": {
                "kind": "manual" if finding.rule == MANUAL_RULE else "finding",
                "finding": finding.to_dict(),
            },
            "labels": dict(finding.labels),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "time_unix": started,
            "host": config.node.name,
            JOB_LABEL: finding.labels.get(JOB_LABEL) or config.job_label,
            "daemon": {"name": "npu-watchdog", "version": __version__, "pid": os.getpid(),
                       "python": platform.python_version()},
            "budget_seconds": scfg.budget,
            "duration_seconds": round(time.monotonic() - t0, 3),
            "complete": not missing,
            "missing": missing,
            "versions": dict(ctx.versions),
            "job_processes": {str(pid): rank for pid, rank in sorted(ctx.roots.items())},
            "items": [i.to_dict() for i in items],
        }
        redactor = Redactor(config_secrets(config))
        for s in found_secrets:
            redactor.add(s)
        out, skipped = self._redact_all(redactor, files)
        if skipped:
            manifest["complete"] = False
            manifest["skipped_files"] = skipped
        manifest["stopped_early"] = self._cancel.is_set()
        manifest["duration_seconds"] = round(time.monotonic() - t0, 3)
        out["manifest.json"] = redactor.data(
            json.dumps(manifest, indent=2, default=str, ensure_ascii=False).encode("utf-8"))
        size = write_archive(path, top, out, scfg.file_mode, mtime=started)
        return manifest, size

    def _redact_all(self, redactor: Redactor, files: Dict[str, bytes]) -> Tuple[Dict[str, bytes], List[Dict[str, str]]]:
        """Every file redacted, or left out (never kept unredacted) once the daemon is stopping."""
        out: Dict[str, bytes] = {}
        skipped: List[Dict[str, str]] = []
        for name in sorted(files):
            try:
                out[name] = redactor.data(files[name], self._cancel)
            except Cancelled:
                skipped.append({"file": name, "reason": "the daemon was stopping before it was redacted"})
        return out, skipped

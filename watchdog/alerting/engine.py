"""The alert engine: findings in, notifications (committed to the outbox) out.

The engine is the only component with memory of what already fired; detectors stay pure. Each
finding fingerprint (`Finding.key`) moves through:

    (absent) -> pending --[held for its `for` duration]--> firing --[absent for resolve_delay]--> gone

A firing alert joins its host+job group buffer; when the buffer's group window ends, every alert
in it that is neither silenced nor inhibited goes out as ONE message (eight idle devices = one
alert listing eight devices). A resolved alert that was notified sends a resolved message, then
its state is deleted, so the next incident pages again. Reminders repeat while firing. Muted
alerts that were never sent are sent at once when their silence ends or their root cause clears.

Everything (alerts, silences, outbox) lives in SQLite in the state directory, so a restart
neither re-pages what was sent nor forgets what is firing. A timer thread re-evaluates every
second (group windows, resolve delays, reminders, silence expiry) between detector passes; all
work here is local (SQLite), sending happens in the outbox's own threads.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from watchdog.alerting.outbox import DeadMan, Outbox
from watchdog.alerting.render import dashboard_link
from watchdog.alerting.store import AlertRow, AlertStore, Silence
from watchdog.config.schema import Config
from watchdog.config.sections.alerting import Matcher, parse_matcher
from watchdog.findings import JOB_LABEL, SEVERITY_RANK, Finding

log = logging.getLogger("watchdog.alerts")

GROUP_LABELS = ("host", JOB_LABEL)


def match_labels(labels: Dict[str, str], rule: str, severity: str) -> Dict[str, str]:
    """What silences and channel matchers see: the labels plus `rule` and `severity`."""
    return {**labels, "rule": rule, "severity": severity}


def matches_all(matchers: List[Matcher], labels: Dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


def group_key(labels: Dict[str, str]) -> str:
    return ",".join(f"{k}={labels.get(k, '')}" for k in GROUP_LABELS)


class AlertEngine:
    def __init__(self, config: Config, runtime: Optional[Any] = None):
        self.config = config
        self.runtime = runtime
        self._lock = threading.RLock()
        self.store = AlertStore(config.paths.state_dir, quarantine_damaged=True)
        self.alerts: Dict[str, AlertRow] = self.store.load_alerts()
        started = time.time()
        for a in self.alerts.values():
            # Absence is counted from this start: the daemon being down is not the finding clearing.
            a.last_seen = max(a.last_seen, started)
        if self.alerts:
            log.info("restored %d alert(s) from %s (%d firing)", len(self.alerts), self.store.path,
                     sum(1 for a in self.alerts.values() if a.state == "firing"))
        self.outbox = Outbox(self.store, config.alerting)
        self.outbox.start()
        self.deadman = DeadMan(config.alerting)
        self._current: List[Finding] = []
        self._present: Dict[str, Finding] = {}
        self._have_findings = False
        self._buffers: Dict[str, float] = {}  # group key -> flush deadline
        self._am_last: Dict[str, float] = {}
        self._active_silences: List[Tuple[Silence, List[Matcher]]] = []
        self._silence_cache: Dict[str, List[Matcher]] = {}
        self._last_prune = 0.0
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._tick_loop, name="alert-engine", daemon=True)
        self._timer.start()

    # -- the daemon's interface --------------------------------------------------------------
    def process(self, findings: List[Finding], now: float) -> None:
        with self._lock:
            self._current = list(findings)
            self._present = {f.key: f for f in findings}
            self._have_findings = True
            for fp, f in self._present.items():
                a = self.alerts.get(fp)
                if a is not None:
                    a.last_seen = now
            self._evaluate(now)

    def current(self) -> List[Finding]:
        with self._lock:
            return list(self._current)

    def reconfigure(self, config: Config) -> None:
        with self._lock:
            old = self.config.alerting
            self.config = config
            if old.channels != config.alerting.channels or old.max_age != config.alerting.max_age:
                self.outbox.reconfigure(config.alerting)
            else:
                self.outbox.config = config.alerting
                for ch in self.outbox.channels.values():
                    ch.alerting = config.alerting
            self.deadman.configure(config.alerting)

    def round_complete(self) -> None:
        """Every probe finished a round: tell the external dead-man checker we are alive."""
        self.deadman.ping()

    def close(self) -> None:
        self._stop.set()
        self._timer.join(2.0)
        self.outbox.stop()
        self.deadman.close()
        with self._lock:
            self.store.save_alerts(list(self.alerts.values()), [])
            self.store.close()

    # -- read side (metrics, status) ----------------------------------------------------------
    def alert_states(self) -> List[AlertRow]:
        with self._lock:
            return list(self.alerts.values())

    def silences_active(self) -> int:
        with self._lock:
            return len(self._active_silences)

    # -- evaluation ---------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                with self._lock:
                    if self._have_findings:
                        self._evaluate(time.time())
                    else:
                        self._load_silences(time.time())
            except Exception:
                log.exception("alert engine evaluation failed")

    def _load_silences(self, now: float) -> None:
        active = []
        for s in self.store.silences():
            if not s.active(now):
                continue
            ms = self._silence_cache.get(s.id)
            if ms is None:
                try:
                    ms = [parse_matcher(m) for m in s.matchers]
                except ValueError:
                    ms = []
                self._silence_cache[s.id] = ms
            if ms:
                active.append((s, ms))
        self._active_silences = active
        if now - self._last_prune > 3600:
            self._last_prune = now
            self.store.prune_silences(now - 7 * 86400)

    def _mute_reason(self, a: AlertRow, firing_sources: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], str]) -> Optional[str]:
        labels = match_labels(a.labels, a.rule, a.severity)
        for s, ms in self._active_silences:
            if matches_all(ms, labels):
                return f"silenced:{s.id}"
        for rule in self.config.alerting.inhibitions:
            if a.rule not in rule.target:
                continue
            key = tuple((k, a.labels.get(k, "")) for k in rule.equal)
            for src in rule.source:
                if src != a.rule and firing_sources.get((src, key)):
                    return f"inhibited:{src}"
        return None

    def _firing_sources(self) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], str]:
        out = {}
        equals = {tuple(r.equal) for r in self.config.alerting.inhibitions}
        for a in self.alerts.values():
            if a.state != "firing":
                continue
            for eq in equals:
                out[(a.rule, tuple((k, a.labels.get(k, "")) for k in eq))] = a.fp
        return out

    def _evaluate(self, now: float) -> None:
        cfg = self.config.alerting
        self._load_silences(now)
        changed: Set[str] = set()
        deleted: List[str] = []
        resolved: Dict[str, List[AlertRow]] = {}
        fired: List[AlertRow] = []
        present = self._present
        # 1. new and updated findings
        for fp, f in present.items():
            a = self.alerts.get(fp)
            if a is None:
                a = AlertRow(fp, f.rule, f.severity, dict(f.labels), f.to_dict(), "pending", now, None, now)
                self.alerts[fp] = a
                log.info("finding %s pending (%s): %s", f.rule, f.severity, f.summary,
                         extra={"finding": f.to_dict(), "event": "finding_new"})
            else:
                if a.state == "firing" and a.notified and SEVERITY_RANK[f.severity] > SEVERITY_RANK.get(a.severity, 0):
                    log.warning("alert %s escalated %s -> %s: %s", f.rule, a.severity, f.severity, f.summary,
                                extra={"finding": f.to_dict(), "event": "finding_changed"})
                    a.notified = False  # an escalation pages again
                a.severity = f.severity
                a.finding = f.to_dict()
            changed.add(fp)
        # 2. state transitions
        for fp, a in list(self.alerts.items()):
            here = fp in present
            absent_for = 0.0 if here else now - a.last_seen
            if a.state == "pending":
                if not here and absent_for >= cfg.resolve_delay:
                    del self.alerts[fp]
                    deleted.append(fp)
                elif here and now - a.pending_since >= cfg.for_rule(a.rule):
                    self._fire(a, now)
                    fired.append(a)
                    changed.add(fp)
            elif a.state == "firing" and not here and absent_for >= cfg.resolve_delay:
                log.info("alert %s resolved after %.0fs absent: %s", a.rule, absent_for, a.finding.get("summary", ""),
                         extra={"finding": a.finding, "event": "finding_resolved"})
                if a.notified:
                    resolved.setdefault(group_key(a.labels), []).append(a)
                del self.alerts[fp]
                deleted.append(fp)
        # 3. muting, grouping, flushing
        sources = self._firing_sources()
        # Evidence for what just started firing, once this pass's roots are known: a symptom that
        # fired in the same pass as its root cause is inhibited and runs no capture.
        for a in fired:
            if self._mute_reason(a, sources) is None:
                self._request_snapshot(a)
        mute: Dict[str, Optional[str]] = {}
        for a in self.alerts.values():
            if a.state == "firing":
                mute[a.fp] = self._mute_reason(a, sources)
                if a.muted != mute[a.fp] and a.notified:
                    a.muted = mute[a.fp]
                    changed.add(a.fp)
        for a in self.alerts.values():
            if a.state != "firing" or a.notified:
                continue
            reason = mute.get(a.fp)
            if reason:
                # Muted now: nothing to schedule (a muted alert must not cut the group window
                # short for the others); remember why, for status and metrics.
                if a.muted != reason:
                    log.info("alert %s not sent: %s", a.rule, reason, extra={"event": "alert_muted"})
                    a.muted = reason
                    changed.add(a.fp)
                continue
            g = group_key(a.labels)
            released = bool(a.muted) and a.fp in present  # its silence ended or its cause cleared
            if released:
                self._buffers[g] = now  # send at once
            elif g not in self._buffers:
                start = a.firing_since or now
                self._buffers[g] = max(now, start + cfg.group_window)
        notes: List[Dict[str, Any]] = []
        for g, deadline in list(self._buffers.items()):
            if deadline > now:
                continue
            del self._buffers[g]
            batch = []
            for a in self.alerts.values():
                if a.state != "firing" or a.notified or group_key(a.labels) != g:
                    continue
                if a.fp not in present or mute.get(a.fp):
                    # Muted (recorded when scheduling above), or its condition already cleared (e.g.
                    # together with the root cause that held it back): on its way to resolving,
                    # nobody needs a page for it now.
                    continue
                if a.muted and not a.snapshot:
                    self._request_snapshot(a)  # held back until now: capture before sending
                a.notified, a.last_notified, a.muted = True, now, None
                batch.append(a)
                changed.add(a.fp)
            if batch:
                notes.append(self._notification("firing", batch, now))
        # 4. reminders
        if cfg.reminder > 0:
            due: Dict[str, List[AlertRow]] = {}
            for a in self.alerts.values():
                if a.state == "firing" and a.notified and not mute.get(a.fp) and a.last_notified is not None \
                        and now - a.last_notified >= cfg.reminder:
                    a.last_notified = now
                    due.setdefault(group_key(a.labels), []).append(a)
                    changed.add(a.fp)
            for batch in due.values():
                notes.append(self._notification("reminder", batch, now))
        for batch in resolved.values():
            notes.append(self._notification("resolved", batch, now))
        # 5. Alertmanager wants firing alerts re-sent before their endsAt
        for ch in self.outbox.channels.values():
            if ch.type != "alertmanager":
                continue
            last = self._am_last.setdefault(ch.name, now)
            if now - last >= ch.cfg.resend_interval:
                self._am_last[ch.name] = now
                live = [a for a in self.alerts.values() if a.state == "firing" and a.notified and not mute.get(a.fp)]
                if live:
                    notes.append(dict(self._notification("refresh", live, now), only=ch.name))
        # 6. commit state and notifications together, before any send
        self.store.save_alerts([self.alerts[fp] for fp in changed if fp in self.alerts], deleted)
        items = []
        for n in notes:
            items += self._route(n)
        self.outbox.enqueue(items)

    def _fire(self, a: AlertRow, now: float) -> None:
        a.state = "firing"
        a.firing_since = now
        log.warning("alert %s firing (%s): %s", a.rule, a.severity, a.finding.get("summary", ""),
                    extra={"finding": a.finding, "event": "alert_firing"})

    def _request_snapshot(self, a: AlertRow) -> None:
        """Ask for the evidence bundle of an alert that will be sent. An inhibited or silenced
        symptom gets none while muted (py-spy on every rank costs), and asks when it is released."""
        f = self._present.get(a.fp)
        snaps = self.runtime.services.get("snapshots") if self.runtime is not None else None
        if snaps is not None and f is not None and not a.snapshot:
            try:
                a.snapshot = snaps.request(f)
                if a.snapshot:
                    log.warning("snapshot of %s: %s", a.rule, a.snapshot, extra={"event": "snapshot_requested"})
            except Exception as exc:
                log.error("snapshot request for %s failed: %s: %s", a.rule, type(exc).__name__, exc)

    def _alert_body(self, a: AlertRow, status: str, now: float) -> Dict[str, Any]:
        f = a.finding
        cfg = self.config.alerting
        ev = list(f.get("evidence") or [])[-cfg.max_log_lines:] if cfg.max_log_lines else []
        return {
            "fp": a.fp, "rule": a.rule, "severity": a.severity, "status": status,
            "summary": f.get("summary", ""), "labels": dict(a.labels), "hint": f.get("hint", ""),
            "value": f.get("value"), "since": f.get("since") or a.firing_since, "starts_at": a.firing_since,
            "ends_at": (a.last_seen if status == "resolved" else None), "evidence": ev, "snapshot": a.snapshot,
            "dashboard": dashboard_link(cfg.dashboard_url, a.labels, a.rule),
        }

    def _notification(self, kind: str, batch: List[AlertRow], now: float) -> Dict[str, Any]:
        status = "resolved" if kind == "resolved" else "firing"
        batch = sorted(batch, key=lambda a: (-SEVERITY_RANK.get(a.severity, 0), a.rule, sorted(a.labels.items())))
        first = batch[0].labels
        fps = ",".join(a.fp for a in batch)
        ikey = hashlib.sha256(f"{kind}|{fps}|{now:.6f}".encode()).hexdigest()[:20]
        for a in batch:
            log.info("notify %s %s: %s", kind, a.rule, a.finding.get("summary", ""),
                     extra={"event": f"notify_{kind}", "ikey": ikey})
        return {"kind": kind, "status": status, "ikey": ikey, "created": now,
                "group": {k: first.get(k, "") for k in GROUP_LABELS},
                "alerts": [self._alert_body(a, status, now) for a in batch]}

    def _route(self, note: Dict[str, Any]) -> List[tuple]:
        """One outbox row per channel that takes at least one alert of the notification."""
        items = []
        only = note.pop("only", None)
        for ch in self.outbox.channels.values():
            if only is not None and ch.name != only:
                continue
            if note["status"] == "resolved" and not ch.send_resolved:
                continue
            floor = SEVERITY_RANK[ch.cfg.min_severity]
            direct = self.config.alerting.sends_direct
            keep = [a for a in note["alerts"] if SEVERITY_RANK.get(a["severity"], 0) >= floor
                    and direct(ch.type, a["rule"])
                    and matches_all(ch.cfg.matchers, match_labels(a["labels"], a["rule"], a["severity"]))]
            if keep:
                items.append((ch.name, note["ikey"], note["kind"], dict(note, alerts=keep)))
        return items


def build_engine(config: Config, runtime: Any) -> AlertEngine:
    """The daemon's engine. `runtime.services` may hold a snapshot taker (see watchdog.snapshots);
    the engine registers its outbox there as "outbox" for the metrics."""
    engine = AlertEngine(config, runtime)
    if runtime is not None:
        runtime.services["outbox"] = engine.outbox
    return engine

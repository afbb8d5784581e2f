"""The scripted fault sequence shared by `npu-watchdog demo` and the end-to-end tests.

A run starts the simulated node, the receiver and the real daemon (a subprocess with a generated
config), then plays steps. Each step injects a fault (or a benign event), waits for what the
on-call person should get (one alert with the expected rule, or nothing), then recovers. The
timeline records, per step: injected at, detected at (the finding first shows in the daemon's
/api/status), delivered at (the webhook copy reaches the receiver).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TextIO

import yaml

from watchdog.demo.node import DEMO_TAG, REPO, SimulatedNode
from watchdog.demo.ports import free_port
from watchdog.demo.receiver import Receiver, plain_lines
from watchdog.words import LANGUAGES, words


def _d(seconds: float) -> str:
    return f"{max(seconds, 0.1):.3g}s"


#: The demo's time constants are written for a leisurely run; speed 1 plays them at this factor,
#: which keeps every fault well apart and the whole sequence near two minutes.
TIME_BASE = 0.5


#: The config `make install` ships (discovery on): the demo runs on it, the zero-config path. It is
#: package data (config/npu-watchdog.example.yaml links to it), so an installed demo has it too.
SHIPPED_CONFIG = Path(__file__).resolve().parent.parent / "config" / "npu-watchdog.example.yaml"


def demo_config(node: SimulatedNode, out: Path, receiver_url: str, port: int, speed: float = 1.0) -> Dict[str, Any]:
    """The shipped example config as `make install` puts it on a node (discovery finds the job,
    its ranks, NPUs, logs, plogs and heartbeats; npu-smi is found on PATH), with the simulated
    node's scope, the receiver's channels and the time constants scaled by `speed`: no `job`, no
    probe selectors or paths, no npu-smi path. (The state folder is given on the command line.)"""
    s = max(speed, 0.05)
    doc: Dict[str, Any] = yaml.safe_load(SHIPPED_CONFIG.read_text())
    for key in ("job", "paths"):
        doc.pop(key, None)
    doc["probes"].pop("commands", None)  # the example's shared-filesystem check is not this node's
    _merge(doc, {
        "node": {"name": "demo-node-01"},
        # The job's ranks carry NPU_WATCHDOG_JOB=llama-demo (discovery's name_env): its label.
        # end_window below the train heartbeat threshold: a silently killed rank is missing
        # before its heartbeat goes stale (rank_missing is the page, the stale heartbeat its symptom).
        "discovery": {"enabled": True, "interval": _d(1 * s), "only_env": f"{DEMO_TAG}={node.tag}",
                      "forget_after": _d(120 * s), "end_window": _d(6 * s)},
        "http": {"listen": f"127.0.0.1:{port}"},
        "logging": {"level": "info", "format": "text"},
        # Time constants only: each probe stays fed by discovery (none is enabled here).
        "probes": {
            "jitter": "0s",
            "history": "30m",
            "process": {"interval": _d(1 * s), "start_grace": _d(60 * s), "zombie_after": _d(5 * s)},
            "heartbeat": {"interval": _d(1 * s),
                          "stale_after": {"init": _d(60 * s), "train": _d(20 * s), "eval": _d(60 * s),
                                          "checkpoint": _d(90 * s), "default": _d(20 * s)},
                          "no_progress_after": _d(20 * s), "start_grace": _d(60 * s)},
            "npu": {"interval": _d(1 * s), "command_timeout": "3s", "failing_after": _d(5 * s)},
            "logs": {"interval": _d(0.5 * s), "hold": _d(15 * s), "cascade_window": _d(60 * s)},
            # Each chip's health, ECC and clock in turn: all three read within the demo's first
            # half minute (the shipped minute would leave the clock unread when /metrics is shown).
            "subhealth": {"interval": _d(10 * s)},
            # The kernel log is this machine's, not the simulated node's: its records (other
            # programs' segfaults, OOM kills) are no part of the scripted faults.
            "kernel": {"enabled": False},
        },
        "trends": {"idle_for": _d(60 * s), "busy_for": _d(60 * s), "low_util_for": _d(120 * s),
                   "temperature_for": _d(20 * s)},
        "stall": {"duration": _d(10 * s), "log_sources": ["train"],
                  "phases": {"init": _d(60 * s), "checkpoint": _d(90 * s), "eval": _d(60 * s)}},
        "alerting": {
            # Grouping is not a detection delay: keep a few seconds even when the demo is sped up.
            "group_window": _d(max(3 * s, 3.0)), "resolve_delay": _d(4 * s), "reminder": "4h", "send_resolved": True,
            "retry_initial": "1s", "retry_max": "5s",
            "channels": [
                {"type": "slack", "name": "oncall-slack", "url": f"{receiver_url}/slack", "min_severity": "warning",
                 "mentions": {"critical": ["here"]}},
                {"type": "webhook", "name": "timeline", "url": f"{receiver_url}/hook", "min_severity": "info"},
            ],
        },
        "snapshots": {"enabled": True, "budget": "10s", "min_interval": _d(30 * s)},
    })
    return doc


def state_dir(out: Path) -> Path:
    """The demo daemon's state folder (given with --state-dir); its snapshots are in `snapshots/`."""
    return out / "state"


#: The notification id every rendered message ends with (`... · firing · id <20 hex>`).
_MESSAGE_ID = re.compile(r"\bid ([0-9a-f]{20})\b")


def is_resolved_title(line: str) -> bool:
    """Whether a chat title says its alerts resolved, in any language messages are written in."""
    return any(f"] {words(lang).t('kind_resolved')}" in line for lang in LANGUAGES)


def _merge(base: Dict[str, Any], over: Dict[str, Any]) -> None:
    """Deep-merge `over` into `base` (dicts merge key by key; anything else replaces)."""
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


@dataclass
class StepResult:
    """One step and what it sent. A fault expects exactly one firing message per channel (and,
    when the step waits for recovery, exactly one resolved message); a benign step expects none."""

    name: str
    expect: Optional[str]
    injected_at: float
    detected_at: Optional[float] = None
    delivered_at: Optional[float] = None
    alerts: List[Dict[str, Any]] = field(default_factory=list)
    #: Firing messages on the webhook copy (the timeline channel).
    messages: int = 0
    note: str = ""
    expect_messages: int = 1
    #: Resolved messages expected after recovery (None: not checked, the step does not recover).
    expect_resolved: Optional[int] = None
    resolved: int = 0
    #: channel -> {"firing": n, "resolved": m}, counted until the next step starts.
    channels: Dict[str, Dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        want_firing = 0 if self.expect is None else self.expect_messages
        if self.expect is not None and self.delivered_at is None:
            return False
        if self.messages != want_firing:
            return False
        if self.expect_resolved is not None and self.resolved != self.expect_resolved:
            return False
        return all(c.get("firing", 0) == want_firing for c in self.channels.values())


class DemoRun:
    """Owns every process of one demo run; `close()` stops all of them."""

    def __init__(self, out: Path, speed: float = 1.0, echo: bool = True, stream: TextIO = sys.stdout,
                 npus: int = 8, overrides: Optional[Dict[str, Any]] = None, verbose: bool = False,
                 language: Optional[str] = None):
        self.out = out
        self.speed = speed * TIME_BASE
        self.stream = stream
        out.mkdir(parents=True, exist_ok=True)
        self.node = SimulatedNode(out / "node", npus=npus)
        # Default: one message per fault, shown after its step; verbose: every message, whole, as it arrives.
        self.echo = echo and not verbose
        self.receiver = Receiver(out=stream, echo=echo and verbose)
        self.port = free_port()
        self.config = demo_config(self.node, out, self.receiver.url, self.port, self.speed)
        if language:
            self.config["alerting"]["language"] = language
        _merge(self.config, overrides or {})
        self.config_path = out / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.daemon: Optional[subprocess.Popen] = None
        self.results: List[StepResult] = []
        self.t0 = time.time()

    # -- processes --------------------------------------------------------------------------
    def start_daemon(self) -> None:
        env = {**os.environ, **self.node.env(), "PYTHONPATH": str(REPO)}
        self._daemon_log = open(self.out / "daemon.log", "ab")
        self.daemon = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "-c", str(self.config_path),
                                        "--state-dir", str(state_dir(self.out))],
                                       stdout=self._daemon_log, stderr=self._daemon_log, env=env, cwd=str(REPO))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.daemon.returncode}; see {self.out / 'daemon.log'}")
            try:
                if self.status().get("probes"):
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("daemon did not come up within 60 s")

    def stop_daemon(self, sig: int = signal.SIGTERM) -> Optional[int]:
        if self.daemon is None:
            return None
        if self.daemon.poll() is None:
            self.daemon.send_signal(sig)
            try:
                self.daemon.wait(20)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self._daemon_log.close()
        rc = self.daemon.returncode
        self.daemon = None
        return rc

    def status(self) -> Dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/status", timeout=5) as r:
            return json.loads(r.read().decode())

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def receiver_down(self) -> None:
        """Take the webhook endpoint away (connection refused) until `receiver_up`."""
        self.receiver.close()

    def receiver_up(self) -> None:
        """Bring the endpoint back on the same port, keeping what it received before."""
        old = self.receiver
        self.receiver = Receiver(out=old.out, echo=old.echo, received=old.received, port=old.port)

    def close(self) -> None:
        try:
            self.node.stop_job()
        finally:
            try:
                self.stop_daemon()
            finally:
                self.receiver.close()

    # -- observation ------------------------------------------------------------------------
    def findings(self) -> List[Dict[str, Any]]:
        try:
            return self.status().get("findings", [])
        except OSError:
            return []

    def firing_alerts_since(self, t: float) -> List[Dict[str, Any]]:
        """Alerts in webhook messages received after `t` with status firing."""
        out = []
        for rec in self.receiver.hooks():
            if rec.at < t:
                continue
            for a in rec.body.get("alerts", []):
                if a.get("status") == "firing":
                    out.append({**a, "_received_at": rec.at})
        return out

    def messages_since(self, t: float, status: str = "firing") -> List[Dict[str, Any]]:
        return [dict(r.body, _received_at=r.at) for r in self.receiver.hooks()
                if r.at >= t and r.body.get("status") == status]

    def channel_counts(self, since: float, until: Optional[float] = None) -> Dict[str, Dict[str, int]]:
        """Messages per channel and status received in [since, until): the on-call view of a step.
        A redelivery of the same notification (same id: delivery is at-least-once, e.g. after a
        SIGKILL between the send and its bookkeeping) is the same message and counted once."""
        out: Dict[str, Dict[str, int]] = {"timeline": {"firing": 0, "resolved": 0},
                                          "oncall-slack": {"firing": 0, "resolved": 0}}
        seen: set = set()
        for r in list(self.receiver.received):
            if r.at < since or (until is not None and r.at >= until):
                continue
            if r.path.startswith("/hook"):
                if r.body.get("kind", r.body.get("status")) in ("reminder", "refresh"):
                    continue
                channel, status = "timeline", r.body.get("status", "firing")
                ident = r.body.get("idempotencyKey")
            elif r.path.startswith("/slack"):
                channel = "oncall-slack"
                status = "resolved" if is_resolved_title((plain_lines(r.body) or [""])[0]) else "firing"
                found = _MESSAGE_ID.search(json.dumps(r.body))
                ident = found.group(1) if found else None
            else:
                continue
            if ident is not None and (channel, ident) in seen:
                continue
            seen.add((channel, ident))
            out[channel]["resolved" if status == "resolved" else "firing"] += 1
        return out

    def say(self, text: str) -> None:
        self.stream.write(f"[{time.time() - self.t0:6.1f}s] {text}\n")
        self.stream.flush()

    # -- steps ------------------------------------------------------------------------------
    def wait_for_alert(self, res: StepResult, rules: tuple, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if res.detected_at is None and any(f["rule"] in rules for f in self.findings()):
                res.detected_at = time.time()
            alerts = [a for a in self.firing_alerts_since(res.injected_at) if a["labels"].get("alertname") in rules]
            if alerts:
                res.delivered_at = min(a["_received_at"] for a in alerts)
                if res.detected_at is None:
                    res.detected_at = res.delivered_at
                return
            time.sleep(0.2)

    def settle(self, res: StepResult, seconds: float) -> None:
        """Let a step's effects arrive (grouping, cascades), then count firing messages since injection."""
        time.sleep(seconds)
        msgs = self.messages_since(res.injected_at)
        res.messages = len(msgs)
        res.channels = self.channel_counts(res.injected_at)
        res.alerts = [a for m in msgs for a in m.get("alerts", []) if a.get("status") == "firing"]

    def run_step(self, name: str, expect: Optional[str], inject: Callable[[], None], budget: float,
                 settle: float, recover: Optional[Callable[[], None]] = None, note: str = "",
                 accept: Optional[tuple] = None) -> StepResult:
        """`expect` is the rule that should page (None: nothing should); `accept` the rules that may
        carry the page instead (one event seen by two probes)."""
        s = self.speed
        self.say(f"--- {name}")
        res = StepResult(name, expect, time.time(), note=note)
        inject()
        if expect:
            self.wait_for_alert(res, accept or (expect,), budget * s)
            self.settle(res, settle * s)
            if res.delivered_at:
                self.say(f"    detected after {res.detected_at - res.injected_at:.1f}s, "
                         f"delivered after {res.delivered_at - res.injected_at:.1f}s, {res.messages} message(s)")
                self.show_first_message(res.injected_at)
            else:
                self.say(f"    NOT delivered within {budget * s:.0f}s")
        else:
            self.settle(res, budget * s)
            self.say(f"    {res.messages} message(s) (expected none)")
        if recover:
            recover()
        self.results.append(res)
        return res

    def show_first_message(self, since: float, max_lines: int = 16, resolved: bool = False) -> None:
        """The step's first chat message, as the on-call person reads it (cut to `max_lines`)."""
        got = [r for r in self.receiver.slack_since(since) if not is_resolved_title(plain_lines(r.body)[0])] \
            if resolved is False else self.receiver.slack_since(since)
        if self.echo and got:
            self.receiver.print_slack(got[0].body, got[0].at, max_lines=max_lines)

    def wait_resolved(self, timeout: float, step: Optional[StepResult] = None) -> bool:
        """Wait until the daemon reports nothing in force (findings cleared); with `step`, also
        for its resolved message, then record the step's message counts per channel."""
        deadline = time.monotonic() + timeout * self.speed
        cleared = False
        while time.monotonic() < deadline:
            if not self.findings():
                cleared = True
                if step is None or self.messages_since(step.injected_at, "resolved"):
                    break
            time.sleep(0.3)
        if step is not None:
            time.sleep(max(2.0, 2 * self.speed))  # a second (wrong) message would arrive by now
            step.resolved = len(self.messages_since(step.injected_at, "resolved"))
            step.messages = len(self.messages_since(step.injected_at))
            step.expect_resolved = 1
            step.channels = self.channel_counts(step.injected_at)
            self.say(f"    {step.resolved} resolved message(s); {channel_text(step.channels)}")
        return cleared

    def restart_job(self) -> None:
        self.node.stop_job()
        self.node.clear_devices()
        self.node.set_mode("train")
        self.node.start_job()

    def play(self) -> List[StepResult]:
        """The standard sequence of the demo."""
        node, s = self.node, self.speed
        self.say("starting the simulated node: 8 NPUs, 8 ranks under a launcher, fake npu-smi, plogs")
        node.start_job()
        self.start_daemon()
        self.say(f"daemon up: http://127.0.0.1:{self.port}/  (config {self.config_path})")
        self.run_step("healthy training", None, lambda: None, budget=12, settle=0)
        self.run_step(f"long checkpoint ({40 * s:.0f} s, longer than the {20 * s:.0f} s train heartbeat threshold)", None,
                      lambda: node.set_mode("checkpoint"), budget=40, settle=0, recover=lambda: node.set_mode("train"))
        self.run_step("training resumes after the checkpoint", None, lambda: None, budget=8, settle=0)
        self.run_step("HCCL hang: every rank blocks in a collective", "stall",
                      lambda: node.set_mode("hang"), budget=60, settle=5)
        rec = StepResult("recovery (training resumes)", "resolved", time.time())
        node.set_mode("train")
        self.say(f"--- {rec.name}")
        deadline = time.monotonic() + 40 * s
        while time.monotonic() < deadline and not self.messages_since(rec.injected_at, "resolved"):
            time.sleep(0.3)
        got = self.messages_since(rec.injected_at, "resolved")
        rec.delivered_at = got[0]["_received_at"] if got else None
        rec.detected_at = rec.delivered_at
        time.sleep(max(2.0, 2 * s))  # a second (wrong) message would arrive by now
        rec.expect_messages, rec.expect_resolved = 0, 1
        rec.messages = len(self.messages_since(rec.injected_at))
        rec.resolved = len(self.messages_since(rec.injected_at, "resolved"))
        rec.channels = self.channel_counts(rec.injected_at)
        self.say(f"    resolved message {'after %.1fs' % (rec.delivered_at - rec.injected_at) if got else 'NOT received'}")
        if got:
            self.show_first_message(rec.injected_at, max_lines=6, resolved=True)
        self.results.append(rec)
        nan = self.run_step("NaN loss on every rank", "loss_nan", lambda: node.set_mode("nan"), budget=30, settle=4,
                            recover=lambda: node.set_mode("train"), accept=("loss_nan", "log_nan"))
        self.wait_resolved(40, nan)
        oom_rank, lost_card, crash_rank = 3 % node.npus, min(5, node.npus - 2), min(6, node.npus - 1)
        oom = self.run_step(f"NPU out of memory on rank {oom_rank} (peers then time out in HCCL)", "log_oom",
                            lambda: node.set_mode("peer_failed", {oom_rank: "oom"}, failed_rank=oom_rank,
                                                  hccl_timeout_seconds=3 * s),
                            budget=30, settle=8, recover=self.restart_job)
        self.wait_resolved(60, oom)
        card = self.run_step(f"card lost: NPU {lost_card} disappears from npu-smi", "npu_missing",
                             lambda: node.set_device(lost_card, gone=True), budget=30, settle=4,
                             recover=self.restart_job)
        self.wait_resolved(60, card)
        self.run_step(f"rank crash: rank {crash_rank} is killed", "rank_missing", lambda: node.kill_rank(crash_rank),
                      budget=30, settle=4)
        return self.results

    def save_artifacts(self) -> None:
        try:
            (self.out / "metrics.txt").write_text(self.metrics_text())
        except OSError as exc:
            (self.out / "metrics.txt").write_text(f"scrape failed: {exc}\n")
        (self.out / "timeline.json").write_text(json.dumps([r.__dict__ for r in self.results], indent=1, default=str))


def channel_text(channels: Dict[str, Dict[str, int]]) -> str:
    """`oncall-slack 1 firing + 1 resolved, timeline 1 firing + 1 resolved`: counts for a reader."""
    return ", ".join(f"{name} {c.get('firing', 0)} firing + {c.get('resolved', 0)} resolved"
                     for name, c in sorted(channels.items())) or "no channel"


def summary_table(results: List[StepResult]) -> str:
    rows = [("step", "expected", "detected", "delivered", "firing/resolved", "result")]
    for r in results:
        det = f"+{r.detected_at - r.injected_at:.1f}s" if r.detected_at else "-"
        dlv = f"+{r.delivered_at - r.injected_at:.1f}s" if r.delivered_at else "-"
        want = 0 if r.expect is None else r.expect_messages
        counts = f"{r.messages}/{r.resolved}" + ("" if r.expect_resolved is None else f" (want {want}/{r.expect_resolved})")
        verdict = "ok" if r.ok else ("MISSED" if r.expect and r.delivered_at is None else "WRONG COUNT")
        rows.append((r.name, r.expect or "no alert", det, dlv, counts, verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)

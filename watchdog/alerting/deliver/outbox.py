"""The durable outbox and its senders: at-least-once delivery that never blocks probing.

The engine commits notifications to SQLite (`AlertStore.enqueue`) and returns; exactly one sender
thread per channel name, for the whole life of the daemon (a reload hands a changed channel to its
running sender between two attempts instead of starting a second one, which would send the row
the first is still sending), takes the oldest due row, waits for the channel's rate limits, makes one attempt and
records the verdict. A crash between commit and send only means the row is sent after the restart.

At least once, explicitly: each attempt is recorded in the row (`in_flight`, committed) just before
the request leaves. A kill after the vendor received a message but before its delivery was
recorded leaves that mark; at the next start such rows are sent again with `repeat` set, never
dropped: the webhook carries the same `Idempotency-Key` (and says `possibleRepeat`), Alertmanager
deduplicates by labels, and chat messages (Slack, Feishu, DingTalk, WeCom have no dedup key)
show a one-line notice that they may repeat an earlier message. Rows that cannot succeed (bad token, bad
signature) are dropped at once with an error log; rows that keep failing are retried with
exponential backoff and jitter (or the vendor's `Retry-After`) until `max_age`, then dropped with
an error log and the `expired` counter.

One kind of notification never touches SQLite: what the engine says about the state folder itself
when it cannot be written (`state_unwritable`), which must not wait for that folder. It is handed to
`send_from_memory` and goes out through the same sender (same rate limits, same retries until
`max_age`), ahead of the stored rows; it is lost if the daemon stops first, as is the condition it
reports.
"""

from __future__ import annotations

import collections
import logging
import random
import sqlite3
import threading
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from watchdog.host import clock
from watchdog.alerting.deliver.channels import Channel, build_channels
from watchdog.alerting.deliver.channels.base import Verdict, scrub, secret_fragments
from watchdog.alerting.deliver.channels.http import Deadline, make_session, read_answer
from watchdog.alerting.decide.notification import Notification, OutboxItem, from_json
from watchdog.alerting.deliver.store import AlertStore
from watchdog.config.sections.alerting import AlertingConfig
from watchdog.config.types import secret_value
from watchdog.core.delivery import EXPIRED, REJECTED, REMOVED, LostNotification
from watchdog.core.findings import SEVERITY_RANK

log = logging.getLogger("watchdog.alerts.outbox")

RESULTS = ("sent", "retried", "failed", "expired")
MAX_RETRY_AFTER = 3600.0
#: A sender with nothing queued sleeps until a row is committed for it (`wake`), or this long at
#: most. Why not a short poll: every row is committed by this process, which wakes the sender,
#: and an idle sender waking every few seconds for a database query was CPU for nothing.
IDLE_WAIT = 300.0
#: Longest sleep while rows wait for a retry time or the rate limit (the wall clock may step).
BUSY_WAIT = 5.0


class RateLimiter:
    """Sliding windows: at most `count` sends in any `per` seconds, for every (count, per)."""

    def __init__(self, limits: List[Tuple[int, float]]):
        self.limits = [(int(c), float(p)) for c, p in limits]
        horizon = max([c for c, _ in self.limits] + [1])
        self.sent: Deque[float] = collections.deque(maxlen=horizon)
        self.blocked_until = 0.0

    def wait_time(self, now: float) -> float:
        wait = max(0.0, self.blocked_until - now)
        for count, per in self.limits:
            recent = [t for t in self.sent if t > now - per]
            if len(recent) >= count:
                wait = max(wait, recent[-count] + per - now)
        return wait

    def record(self, now: float) -> None:
        self.sent.append(now)

    def block(self, until: float) -> None:
        """The vendor said "slow down": nothing is sent to this channel before `until`."""
        self.blocked_until = max(self.blocked_until, until)


@dataclass
class MemoryRow:
    """A notification kept in memory only (see `Outbox.send_from_memory`)."""

    ikey: str
    kind: str
    note: Notification
    created: float
    attempts: int = 0
    next_at: float = 0.0
    #: An earlier attempt may have reached the vendor (see `Verdict.maybe_delivered`).
    repeat: bool = False


def backoff(cfg: AlertingConfig, attempts: int) -> float:
    """Seconds before the next attempt after `attempts` failed ones: exponential, with jitter."""
    base = min(cfg.retry_max, cfg.retry_initial * (2 ** min(attempts, 30)))
    return base * random.uniform(0.5, 1.0)


def vendor_delay(cfg: AlertingConfig, retry_after: float) -> float:
    """Seconds to wait when the vendor said `Retry-After`: its word, but never longer than the
    channel's `retry_max`. A vendor (or anything posing as one) answering `Retry-After: 86400`
    must not silence the channel, later incidents included, for a day; an early retry costs one
    more 429 at worst."""
    return min(cfg.retry_max, MAX_RETRY_AFTER, max(0.5, retry_after))


def _capped(cfg: AlertingConfig, retry_after: Optional[float]) -> str:
    if retry_after is not None and retry_after > vendor_delay(cfg, retry_after):
        asked = f"{retry_after:.0f}s" if retry_after < 1e7 else "more than 100 days"  # not "inf" or 29 digits
        return f" (the vendor asked for {asked}; capped by alerting.retry_max)"
    return ""


class _ChannelSender:
    def __init__(self, outbox: "Outbox", channel: Channel):
        self.outbox = outbox
        self.channel = channel
        self.limiter = RateLimiter(channel.cfg.limits())
        self.wake = threading.Event()
        self.stop = threading.Event()
        #: Set (under the outbox lock) when the loop has ended for good: only then may another
        #: sender for this channel name start.
        self.exited = False
        #: Made on the first attempt (requests is imported then, not at start-up).
        self._session: Optional[Any] = None
        #: A step failed on the database (its traceback was logged once; the rest are quiet).
        self._failing = False
        self.thread = threading.Thread(target=self._run, name=f"send-{channel.name}", daemon=True)

    def adopt(self, channel: Channel) -> None:
        """Take a reloaded channel (same name); the attempt under way, if any, finishes as it was.
        Called under the outbox lock."""
        if channel.cfg.limits() != self.channel.cfg.limits():
            limiter = RateLimiter(channel.cfg.limits())
            limiter.sent.extend(self.limiter.sent)
            limiter.block(self.limiter.blocked_until)
            self.limiter = limiter
        self.channel = channel
        self.stop.clear()
        self.wake.set()

    def _run(self) -> None:
        while True:
            with self.outbox._lock:
                if self.stop.is_set():
                    self.exited = True
                    break
            try:
                delay = self._step()
                if self._failing:
                    self._failing = False
                    log.info("sender %s: the outbox can be used again", self.channel.name)
            except Exception as exc:  # a database hiccup: keep the row, try again shortly
                # Once per episode with the traceback: a full disk would repeat it every 2 s.
                text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                log.log(logging.DEBUG if self._failing else logging.ERROR, "sender %s: %s", self.channel.name,
                        scrub(text if not self._failing else f"{type(exc).__name__}: {exc}", self.channel.secrets()))
                self._failing = True
                delay = 2.0
            if delay > 0:
                self.wake.wait(delay if delay == IDLE_WAIT else min(delay, BUSY_WAIT))
                self.wake.clear()
        if self._session is not None:
            self._session.close()

    @property
    def session(self) -> Any:
        """The sender's HTTP session (kept alive across its attempts), made when first needed."""
        if self._session is None:
            self._session = make_session()
        return self._session

    def _step(self) -> float:
        """Handle at most one row; returns how long to sleep before the next step."""
        ch = self.channel
        store = self.outbox.store
        now = clock.now()
        mem, mem_at = self.outbox.memory_head(ch.name)
        if mem is not None and mem_at <= now:
            return self._step_memory(mem, now)
        row = store.next_due(ch.name, now, horizon=self.outbox.config.retry_max + BUSY_WAIT)
        if row is None:
            nxt = store.next_time(ch.name)
            nxt = mem_at if nxt is None else min(nxt, mem_at)
            return IDLE_WAIT if nxt == float("inf") else min(BUSY_WAIT, max(0.05, nxt - now))
        cfg = self.outbox.config
        if now - row.created > cfg.max_age:
            store.done(row.id)
            self._lost(row.note, EXPIRED, row.last_error or "no answer recorded")
            log.error("channel %s: gave up on a %s notification after %d attempts over %.0fs (max_age %.0fs);"
                      " last error: %s", ch.name, row.kind, row.attempts, now - row.created, cfg.max_age,
                      row.last_error or "none", extra={"channel": ch.name, "event": "notification_expired"})
            return 0.0
        wait = self.limiter.wait_time(now)
        if wait > 0:
            return wait
        store.begin_attempt(row.id)
        # Counted from when the request leaves (after the attempt's commit), as the vendor counts.
        self.limiter.record(clock.now())
        verdict = ch.deliver(replace(row.note, repeat=True) if row.repeat else row.note, self.session)
        self.outbox.last_verdict[ch.name] = verdict
        if verdict.ok:
            store.done(row.id)
            self.outbox.count(ch.name, "sent")
            log.info("channel %s: delivered %s notification %s (%d alerts): %s", ch.name, row.kind, row.ikey,
                     len(row.note.alerts), verdict.line(), extra={"channel": ch.name})
            return 0.0
        if not verdict.retryable:
            store.done(row.id)
            self._lost(row.note, REJECTED, verdict.line())
            log.error("channel %s: notification %s REJECTED and dropped, fix the channel config: %s",
                      ch.name, row.ikey, verdict.line(), extra={"channel": ch.name, "event": "notification_rejected"})
            return 0.0
        attempt = row.attempts + 1
        # Counted from the answer, as the vendor counts its Retry-After (not from before the
        # attempt's commit and request, which a loaded disk or network can make last a while).
        answered = clock.now()
        if verdict.retry_after is not None:
            delay = vendor_delay(cfg, verdict.retry_after)
            self.limiter.block(answered + delay)
        else:
            delay = backoff(cfg, row.attempts)
        store.retry(row.id, answered + delay, verdict.line(), repeat=verdict.maybe_delivered)
        self.outbox.count(ch.name, "retried")
        level = logging.WARNING if attempt <= 3 or attempt % 10 == 0 else logging.DEBUG
        log.log(level, "channel %s: attempt %d of notification %s failed (%s); retrying in %.1fs%s", ch.name, attempt,
                row.ikey, verdict.line(), delay, _capped(cfg, verdict.retry_after), extra={"channel": ch.name})
        return 0.0


    def _lost(self, note: Notification, outcome: str, error: str) -> None:
        """Count a notification this channel dropped (rejected or expired) and report it to the
        outbox's `on_lost` (the daemon keeps it for the `notifications_failing` detector)."""
        self.outbox.count(self.channel.name, outcome)
        self.outbox.report_lost(self.channel.name, note, outcome, scrub(error, self.channel.secrets()))

    def _step_memory(self, mem: MemoryRow, now: float) -> float:
        """One attempt of a memory-only notification: what `_step` does for a stored row, with
        the bookkeeping in the row itself instead of SQLite."""
        ch = self.channel
        cfg = self.outbox.config
        if now - mem.created > cfg.max_age:
            self.outbox.memory_done(ch.name, mem)
            self._lost(mem.note, EXPIRED, "gave up after max_age")
            log.error("channel %s: gave up on a %s notification after %d attempts (max_age %.0fs)", ch.name,
                      mem.kind, mem.attempts, cfg.max_age, extra={"channel": ch.name, "event": "notification_expired"})
            return 0.0
        wait = self.limiter.wait_time(now)
        if wait > 0:
            return wait
        self.limiter.record(clock.now())
        verdict = ch.deliver(replace(mem.note, repeat=True) if mem.repeat else mem.note, self.session)
        self.outbox.last_verdict[ch.name] = verdict
        if verdict.ok or not verdict.retryable:
            self.outbox.memory_done(ch.name, mem)
            if verdict.ok:
                self.outbox.count(ch.name, "sent")
            else:
                self._lost(mem.note, REJECTED, verdict.line())
            log.log(logging.INFO if verdict.ok else logging.ERROR, "channel %s: %s %s notification %s (from memory): %s",
                    ch.name, "delivered" if verdict.ok else "REJECTED and dropped", mem.kind, mem.ikey,
                    verdict.line(), extra={"channel": ch.name})
            return 0.0
        delay = backoff(cfg, mem.attempts)
        answered = clock.now()  # counted from the answer, as in `_step`
        if verdict.retry_after is not None:
            delay = vendor_delay(cfg, verdict.retry_after)
            self.limiter.block(answered + delay)
        mem.attempts += 1
        mem.next_at = answered + delay
        mem.repeat = mem.repeat or verdict.maybe_delivered
        self.outbox.count(ch.name, "retried")
        log.warning("channel %s: attempt %d of notification %s (from memory) failed (%s); retrying in %.1fs%s",
                    ch.name, mem.attempts, mem.ikey, verdict.line(), delay, _capped(cfg, verdict.retry_after),
                    extra={"channel": ch.name})
        return 0.0


class Outbox:
    """Owns the sender threads; the engine calls `enqueue`, metrics call `stats` and `counts`."""

    def __init__(self, store: AlertStore, config: AlertingConfig):
        self.store = store
        self.config = config
        self.channels: Dict[str, Channel] = build_channels(config)
        self.counts: Dict[Tuple[str, str], int] = {}
        self.last_verdict: Dict[str, Verdict] = {}
        #: Told of every notification a channel drops (rejected or expired); set by the daemon.
        self.on_lost: Optional[Callable[[LostNotification], None]] = None
        self._lock = threading.Lock()
        self._workers: Dict[str, _ChannelSender] = {}
        #: Memory-only notifications per channel, oldest first (see `send_from_memory`).
        self._memory: Dict[str, Deque[MemoryRow]] = {}
        for name in self.channels:
            for r in RESULTS:
                self.counts[(name, r)] = 0
        # Once per daemon life, before any sender runs: attempts a kill interrupted.
        try:
            n = store.interrupted_attempts()
        except (sqlite3.Error, OSError) as exc:  # a state folder that cannot be written at start
            log.error("outbox: cannot check for interrupted sends now (%s); they are sent as ordinary rows", exc)
            n = 0
        if n:
            log.warning("outbox: %d notification(s) were being sent when the daemon stopped; they are sent again,"
                        " marked as possible repeats", n, extra={"event": "notification_interrupted"})

    def report_lost(self, channel: str, note: Notification, outcome: str, error: str) -> None:
        """Tell `on_lost` of a notification dropped undelivered (the daemon raises
        `notifications_failing` from it); `error` is already free of the channel's secrets."""
        hook = self.on_lost
        if hook is None:
            return
        worst = max((a.severity for a in note.alerts), key=lambda s: SEVERITY_RANK.get(s, 0), default="warning")
        lost = LostNotification(channel, outcome, note.status, worst, tuple(a.rule for a in note.alerts),
                                error[:300], clock.now())
        try:
            hook(lost)
        except Exception:  # the report is best effort: the row is dropped and counted either way
            log.exception("channel %s: could not record a lost notification", channel)

    def count(self, channel: str, result: str) -> None:
        with self._lock:
            self.counts[(channel, result)] = self.counts.get((channel, result), 0) + 1

    def start(self) -> None:
        self._drop_orphans()
        self._sync_workers()

    def _sync_workers(self) -> None:
        """One sender per configured channel: reuse the running one (never a second thread for
        a name whose sender may still be mid-attempt), start the missing ones, stop the rest."""
        with self._lock:
            for name, ch in self.channels.items():
                w = self._workers.get(name)
                if w is not None and not w.exited:
                    w.adopt(ch)
                    continue
                w = _ChannelSender(self, ch)
                self._workers[name] = w
                w.thread.start()
            for name, w in self._workers.items():
                if name not in self.channels:
                    w.stop.set()
                    w.wake.set()

    def _drop_orphans(self) -> None:
        for name in self.store.outbox_channels():
            if name not in self.channels:
                try:
                    dropped = self.store.drop_channel(name)
                except (sqlite3.Error, OSError) as exc:  # their sender is gone: they wait, harmless
                    log.error("outbox: cannot drop the notifications of removed channel %s now: %s", name, exc)
                    continue
                log.warning("outbox: dropped %d notification(s) for channel %s, which is no longer configured",
                            len(dropped), name)
                # A channel renamed while its page waited: that page reaches on-call through the
                # channels configured now, as notifications_failing's evidence.
                for note in dropped:
                    self.report_lost(name, note, REMOVED, "the channel was removed from the config before delivery")

    def send_from_memory(self, items: Sequence[OutboxItem]) -> None:
        """Queue (channel, ikey, kind, note) rows in memory only and wake their senders: for what
        must not wait for the state folder (the engine's `state_unwritable`)."""
        now = clock.now()
        with self._lock:
            for channel, ikey, kind, note in items:
                self._memory.setdefault(channel, collections.deque()).append(
                    MemoryRow(ikey, kind, from_json(note), now, 0, now))
        self.wake([channel for channel, *_ in items])

    def memory_head(self, channel: str) -> Tuple[Optional[MemoryRow], float]:
        """The oldest memory-only row of `channel` and when it is due (infinity when none)."""
        with self._lock:
            q = self._memory.get(channel)
            if not q:
                return None, float("inf")
            return q[0], q[0].next_at

    def memory_done(self, channel: str, row: MemoryRow) -> None:
        with self._lock:
            q = self._memory.get(channel)
            if q and q[0] is row:
                q.popleft()

    def enqueue(self, items: Sequence[OutboxItem]) -> None:
        """Commit (channel, ikey, kind, note) rows, then wake their senders."""
        if not items:
            return
        self.store.enqueue(items)
        self.wake([channel for channel, *_ in items])

    def wake(self, channels: List[str]) -> None:
        """Rows for these channels were committed (by `enqueue` or a caller's own transaction)."""
        for channel in channels:
            w = self._workers.get(channel)
            if w is not None:
                w.wake.set()

    def reconfigure(self, config: AlertingConfig) -> None:
        self.config = config
        self.channels = build_channels(config)
        with self._lock:
            for name in self.channels:
                for r in RESULTS:
                    self.counts.setdefault((name, r), 0)
        self.start()

    def stop(self, timeout: float = 2.0) -> None:
        with self._lock:
            workers = list(self._workers.values())
            for w in workers:
                w.stop.set()
                w.wake.set()
        deadline = time.monotonic() + timeout
        for w in workers:
            w.thread.join(max(0.0, deadline - time.monotonic()))

    def stats(self) -> Tuple[int, float]:
        """(pending rows, age in seconds of the oldest, 0 when empty)."""
        n, oldest = self.store.outbox_stats()
        return n, (max(0.0, clock.now() - oldest) if oldest else 0.0)

    def secrets(self) -> List[str]:
        out: List[str] = []
        for ch in self.channels.values():
            out += ch.secrets()
        return out


class DeadMan:
    """Requests the dead-man URL after each complete probe round, in its own thread (coalesced:
    a slow checker never queues up pings, and never delays a probe)."""

    def __init__(self, config: AlertingConfig):
        self.counts = {"ok": 0, "failed": 0}
        self._event = threading.Event()
        self._stop = threading.Event()
        self.configure(config)
        self._thread = threading.Thread(target=self._run, name="deadman", daemon=True)
        self._thread.start()

    def configure(self, config: AlertingConfig) -> None:
        self.url = secret_value(config.deadman_url) if config.deadman_url is not None else ""
        self.timeout = config.deadman_timeout
        self._secrets = secret_fragments([self.url])

    def ping(self) -> None:
        if self.url:
            self._event.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._event.wait()  # set by a ping, or by close(): no wake-ups while idle
            self._event.clear()
            if self._stop.is_set() or not self.url:
                continue
            ok, detail = self._ping_once()
            self.counts["ok" if ok else "failed"] += 1
            if not ok:
                log.warning("dead-man ping failed: %s", detail)

    def _ping_once(self) -> Tuple[bool, str]:
        """One GET, bounded in total time (twice the timeout) and in the answer read."""
        deadline = Deadline(2 * self.timeout)
        try:
            with make_session() as session, deadline:
                r = session.get(self.url, timeout=(self.timeout, self.timeout), allow_redirects=False, stream=True)
                try:
                    read_answer(r, 4096)
                finally:
                    r.close()
            if deadline.expired:
                return False, f"no complete answer within {2 * self.timeout:g}s"
            return 200 <= r.status_code < 300, f"HTTP {r.status_code}"
        except Exception as exc:  # requests', urllib3's or the socket's
            if deadline.expired:
                return False, f"no complete answer within {2 * self.timeout:g}s"
            return False, scrub(f"{type(exc).__name__}: {exc}", self._secrets)

    def close(self) -> None:
        self._stop.set()
        self._event.set()

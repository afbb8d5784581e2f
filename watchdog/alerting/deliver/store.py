"""SQLite persistence of the alerting state: alerts, silences and the outbox, in one private file.

Why SQLite: a commit is durable (the outbox promise "committed before any send" depends on it), it
is safe across processes (`npu-watchdog silence add` writes while the daemon reads), and it needs
no server. The file and its journal are created 0600 inside the 0700 state directory.

Nothing secret is ever written here: channels are referred to by name, and messages are rendered
(and signed) only at send time.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sqlite3
import threading
import uuid
from dataclasses import dataclass
from contextlib import contextmanager
from typing import ContextManager, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from watchdog.host import clock
from watchdog.alerting.deliver.lateopen import LateOpen
from watchdog.alerting.deliver.rebuild import DamageRebuild, storage_fault
from watchdog.service import statefiles
from watchdog.core.findings import JOB_LABEL, LEGACY_JOB_LABEL, fingerprint, upgrade_labels
# The decide stage's records, which this module saves and loads (importable from here too).
from watchdog.alerting.decide.notification import Notification, OutboxItem, from_json, to_json
from watchdog.alerting.decide.records import AlertRow, Silence

log = logging.getLogger("watchdog.alerts")

DB_NAME = "alerting.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    fp TEXT PRIMARY KEY,
    rule TEXT NOT NULL,
    severity TEXT NOT NULL,
    labels TEXT NOT NULL,
    finding TEXT NOT NULL,
    state TEXT NOT NULL,
    pending_since REAL NOT NULL,
    firing_since REAL,
    last_seen REAL NOT NULL,
    notified INTEGER NOT NULL DEFAULT 0,
    last_notified REAL,
    snapshot TEXT,
    muted TEXT,
    incident TEXT
);
CREATE TABLE IF NOT EXISTS silences (
    id TEXT PRIMARY KEY,
    matchers TEXT NOT NULL,
    starts_at REAL NOT NULL,
    ends_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    comment TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    created REAL NOT NULL,
    ikey TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL,
    last_error TEXT,
    in_flight INTEGER NOT NULL DEFAULT 0,
    repeat INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (channel, next_at);
CREATE TABLE IF NOT EXISTS interruptions (
    domain TEXT NOT NULL,
    cause TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (domain, cause)
);
"""


def db_path(state_dir: str) -> str:
    return os.path.join(state_dir, DB_NAME)


def _identity(path: str) -> Optional[tuple]:
    """(device, inode) of the file at `path`, None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@dataclass
class OutboxRow:
    id: int
    channel: str
    created: float
    ikey: str
    kind: str
    #: The notification as the channel gets it (read back from its JSON form by `from_json`).
    note: Notification
    attempts: int
    next_at: float
    last_error: Optional[str]
    #: An attempt of an earlier daemon began and its outcome was never recorded: the vendor may
    #: already show it, so this send is marked as a possible repeat.
    repeat: bool = False


class OutboxQueue:
    """The outbox table of `AlertStore` (a part of its own so each part stays readable): rows
    committed before any send, taken oldest first per channel by the senders."""

    _lock: threading.RLock
    _db: sqlite3.Connection

    def _tx(self) -> ContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def enqueue(self, items: Sequence[OutboxItem]) -> None:
        """Commit notifications (channel, ikey, kind, note) in one transaction, before any send."""
        with self._tx() as db:
            self._enqueue(db, items)

    @staticmethod
    def _enqueue(db: sqlite3.Connection, items: Sequence[OutboxItem]) -> None:
        now = clock.now()
        for channel, ikey, kind, note in items:
            if kind == "refresh":
                # An unsent periodic refresh is superseded by the newer one.
                db.execute("DELETE FROM outbox WHERE channel=? AND kind='refresh' AND attempts=0 AND in_flight=0",
                           (channel,))
            db.execute("INSERT INTO outbox (channel, created, ikey, kind, body, attempts, next_at)"
                       " VALUES (?,?,?,?,?,0,?)", (channel, now, ikey, kind, json.dumps(to_json(note), default=str), now))

    def next_due(self, channel: str, now: float, horizon: float = float("inf")) -> Optional[OutboxRow]:
        """The channel's oldest row if it is due at `now`. A row planned more than `horizon`
        ahead is due too: no delay is that long, so its time was written before the wall clock
        stepped back (in an earlier life of the daemon; within one the clock does not step)."""
        with self._lock:
            # Strictly first in, first out per channel: the oldest row goes first even while it waits
            # for a retry, so an on-call reader never sees a resolve before its firing message.
            r = self._db.execute(
                "SELECT id, channel, created, ikey, kind, body, attempts, next_at, last_error, repeat FROM outbox"
                " WHERE channel=? ORDER BY id LIMIT 1", (channel,)).fetchone()
        if r is None or now < r[7] <= now + horizon:
            return None
        return OutboxRow(r[0], r[1], r[2], r[3], r[4], from_json(json.loads(r[5])), r[6], r[7], r[8], bool(r[9]))

    def next_time(self, channel: str) -> Optional[float]:
        with self._lock:
            r = self._db.execute("SELECT next_at FROM outbox WHERE channel=? ORDER BY id LIMIT 1", (channel,)).fetchone()
        return r[0] if r else None

    def begin_attempt(self, row_id: int) -> None:
        """Record, durably and before the request leaves, that an attempt of this row is under way."""
        with self._tx() as db:
            db.execute("UPDATE outbox SET in_flight=1 WHERE id=?", (row_id,))

    def interrupted_attempts(self) -> int:
        """At the daemon's start: rows whose attempt began in an earlier life and whose outcome was
        never recorded (killed mid-send) are sent again, marked as possible repeats. Returns how many."""
        with self._tx() as db:
            return db.execute("UPDATE outbox SET repeat=1, in_flight=0 WHERE in_flight=1").rowcount

    def done(self, row_id: int) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM outbox WHERE id=?", (row_id,))

    def retry(self, row_id: int, next_at: float, error: str, repeat: bool = False) -> None:
        """Schedule the next attempt; `repeat`: this one may have reached the vendor, so every
        later attempt is marked as a possible repeat."""
        with self._tx() as db:
            db.execute("UPDATE outbox SET attempts=attempts+1, next_at=?, last_error=?, in_flight=0, "
                       "repeat=MAX(repeat, ?) WHERE id=?", (next_at, error, int(repeat), row_id))

    def outbox_stats(self) -> tuple:
        """(pending count, oldest created time or None)."""
        with self._lock:
            r = self._db.execute("SELECT COUNT(*), MIN(created) FROM outbox").fetchone()
        return int(r[0]), r[1]

    def outbox_channels(self) -> List[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT DISTINCT channel FROM outbox").fetchall()]

    def drop_channel(self, channel: str) -> List[Notification]:
        """Delete a removed channel's undelivered rows; returns their notifications (unreadable
        bodies left out: they are dropped all the same)."""
        with self._tx() as db:
            bodies = [r[0] for r in db.execute("SELECT body FROM outbox WHERE channel=? ORDER BY id", (channel,))]
            db.execute("DELETE FROM outbox WHERE channel=?", (channel,))
        out = []
        for body in bodies:
            try:
                out.append(from_json(json.loads(body)))
            except (ValueError, TypeError, KeyError):
                continue
        return out


class InterruptionCounts:
    """Mixed into AlertStore: the interruptions paged, by (domain, cause), kept with the alerts
    (see watchdog.alerting.decide.interruptions)."""

    _lock: threading.RLock
    _db: sqlite3.Connection

    def load_interruptions(self) -> Dict[Tuple[str, str], int]:
        with self._lock:
            rows = self._db.execute("SELECT domain, cause, count FROM interruptions").fetchall()
        return {(str(d), str(c)): int(n) for d, c, n in rows if isinstance(n, int) and n >= 0}

    @staticmethod
    def _add_interruptions(db: sqlite3.Connection, added: Mapping[Tuple[str, str], int]) -> None:
        """Within the pass's transaction. Added, not replaced: a database opened late (see
        LateOpen) keeps what it held."""
        for (domain, cause), n in added.items():
            db.execute("INSERT OR IGNORE INTO interruptions (domain, cause, count) VALUES (?,?,0)", (domain, cause))
            db.execute("UPDATE interruptions SET count = count + ? WHERE domain=? AND cause=?", (n, domain, cause))


def set_aside_non_files(db: str) -> None:
    """The database or its journal as something that is not a regular file (a directory, a
    FIFO, a dangling link): SQLite cannot use it, and the daemon ran on in-memory
    state holding every page for as long as it stayed. Set aside as damage, like a corrupt
    file, before the open."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        path = db + suffix
        if not os.path.lexists(path):
            continue
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)  # a link to a database elsewhere is fine
        except FileNotFoundError:
            regular = False  # a dangling link
        if not regular:
            statefiles.quarantine(path, "not a regular file (a directory, FIFO or dangling link), "
                                        "not a usable SQLite database")


def _close(db: Optional[sqlite3.Connection]) -> None:
    """Close a connection that may be broken (its errors are the reason it is being closed)."""
    if db is not None:
        try:
            db.close()
        except sqlite3.Error:
            pass


class AlertStore(OutboxQueue, InterruptionCounts, LateOpen, DamageRebuild):
    """Thread-safe access to the alerting database (one connection, one lock)."""

    def __init__(self, state_dir: str, quarantine_damaged: bool = False, defer_faults: bool = False):
        """Open (or create) the database. With `quarantine_damaged` (the daemon), a file that is not
        a usable database is set aside and a fresh one started, instead of failing every start.
        With `defer_faults` (the daemon), a folder that cannot be created, written or opened now
        (full or read-only disk at boot) is no reason to exit: see `unopened`."""
        self.path = db_path(state_dir)
        self._lock = threading.RLock()
        #: Silence writes made through this connection (SQLite's data_version does not count them).
        self._silence_writes = 0
        self.unopened = ""  # see LateOpen
        self._identity: Optional[tuple] = None
        try:
            os.makedirs(state_dir, mode=0o700, exist_ok=True)
            self._open_or_quarantine(quarantine_damaged)
        except (OSError, sqlite3.Error) as exc:
            if not defer_faults or (isinstance(exc, sqlite3.Error) and not storage_fault(exc)):
                raise
            self._stand_in(exc, _SCHEMA)

    def _open_or_quarantine(self, quarantine_damaged: bool) -> None:
        if quarantine_damaged:
            set_aside_non_files(self.path)
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            if not quarantine_damaged or storage_fault(exc):
                raise  # a full or read-only disk is no reason to set a good database aside
            self._close_quietly()
            statefiles.quarantine(self.path, f"not a usable SQLite database: {exc}", ("-journal", "-wal", "-shm"))
            self._open()

    def _close_quietly(self) -> None:
        _close(getattr(self, "_db", None))

    def _connect(self, path: str) -> sqlite3.Connection:
        db = sqlite3.connect(path, timeout=15.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA synchronous=FULL")
        return db

    def _open(self) -> None:
        if not os.path.exists(self.path):
            fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
        try:
            os.chmod(self.path, 0o600)
        except OSError:  # not ours to change, or a read-only folder: writes will say so
            pass
        self._db = self._connect(self.path)
        self._identity = _identity(self.path)
        check = self._db.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise sqlite3.DatabaseError("integrity check: " + "; ".join(str(r[0]) for r in check[:3]))
        for stmt in _SCHEMA.strip().split(";"):
            if stmt.strip():
                self._db.execute(stmt)
        # Tables of another shape (an old or foreign file) fail here, not later in the engine.
        self._db.execute("SELECT fp, rule, severity, labels, finding, state, pending_since, firing_since, last_seen,"
                         " notified, last_notified, snapshot, muted FROM alerts LIMIT 1").fetchall()
        self._db.execute("SELECT id, matchers, starts_at, ends_at, created_by, comment, created_at FROM silences"
                         " LIMIT 1").fetchall()
        self._db.execute("SELECT id, channel, created, ikey, kind, body, attempts, next_at, last_error FROM outbox"
                         " LIMIT 1").fetchall()
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(alerts)").fetchall()}
        if "incident" not in cols:  # a state file from before incidents were tracked
            self._db.execute("ALTER TABLE alerts ADD COLUMN incident TEXT")
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(outbox)").fetchall()}
        for col in ("in_flight", "repeat"):  # a state file from before attempts were recorded
            if col not in cols:
                self._db.execute(f"ALTER TABLE outbox ADD COLUMN {col} INTEGER NOT NULL DEFAULT 0")
        self._rename_job_label()

    def _rename_job_label(self) -> None:
        """Alerts stored by a version that labelled the training job `job` get `training_job` and
        the fingerprint that goes with it, so an upgrade neither resolves nor re-pages them."""
        with self._tx() as db:
            rows = db.execute("SELECT fp, rule, labels, finding FROM alerts WHERE labels LIKE ?",
                              (f'%"{LEGACY_JOB_LABEL}"%',)).fetchall()
            for old_fp, rule, labels_json, finding_json in rows:
                try:
                    labels, finding = json.loads(labels_json), json.loads(finding_json)
                except ValueError:
                    continue  # unreadable row: not ours to judge here; left as it is
                if not isinstance(labels, dict) or JOB_LABEL in labels or LEGACY_JOB_LABEL not in labels:
                    continue
                labels = upgrade_labels(labels)
                new_fp = fingerprint(rule, labels)
                if isinstance(finding, dict):
                    finding.update(labels=labels, key=new_fp)
                db.execute("DELETE FROM alerts WHERE fp = ?", (new_fp,))
                db.execute("UPDATE alerts SET fp = ?, labels = ?, finding = ? WHERE fp = ?",
                           (new_fp, json.dumps(labels), json.dumps(finding, default=str), old_fp))

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (disk full, folder read-only or deleted) may leave the transaction
                # open, or SQLite may have ended it already: either way none may stay open, or
                # every later BEGIN would fail after the disk is back.
                if self._db.in_transaction:
                    try:
                        self._db.execute("ROLLBACK")
                    except sqlite3.Error as exc:
                        log.debug("rollback after a failed transaction: %s", exc)
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- the state folder under faults ----------------------------------------------------
    def moved(self) -> bool:
        """Whether the database file is no longer the one this connection writes (deleted, alone
        or with its folder, or replaced), or was never opened: one `stat`, cheap enough for every
        turn of the main loop."""
        return bool(self.unopened) or _identity(self.path) != self._identity

    def heal(self, reopen: bool = False) -> str:
        """Re-create a state folder or database deleted under the running daemon. The deleted file
        lives on while the connection holds it open, so SQLite's backup copies it, alerts, silences
        and queued notifications alike, into a new private file (0600, in a 0700 folder), renamed
        into place only when complete. Returns what was done ("" when nothing was missing); raises
        OSError or sqlite3.Error when it cannot be done now (the caller retries). With `reopen`
        (a write met a read-only database) the connection is opened anew."""
        with self._lock:
            if self.unopened:
                return self._open_late()
            if not self.moved():
                if reopen:
                    # SQLite opened a read-only file read-only for good: a new connection sees
                    # the folder writable again once it is (a remount read-write).
                    old, self._db = self._db, self._connect(self.path)
                    old.close()
                return ""
            folder = os.path.dirname(self.path) or "."
            made = not os.path.isdir(folder)
            if made:
                os.makedirs(folder, mode=0o700, exist_ok=True)
                os.chmod(folder, 0o700)  # makedirs' mode passes through the umask
            tmp = self.path + ".rebuild"
            with statefiles.atomic_file(self.path, tmp=tmp):
                copy = self._connect(tmp)
                try:
                    self._db.backup(copy)
                finally:
                    copy.close()
            old, self._db = self._db, self._connect(self.path)
            self._identity = _identity(self.path)
            old.close()
            what = f"the state folder {folder} was" if made else f"{self.path} was"
            return (f"{what} deleted under the running daemon; re-created it from the open database (mode 0700, "
                    "the database 0600); alerts, silences and queued notifications carried over")

    # -- alerts ----------------------------------------------------------------------------
    def load_alerts(self) -> Dict[str, AlertRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT fp, rule, severity, labels, finding, state, pending_since, firing_since, last_seen,"
                " notified, last_notified, snapshot, muted, incident FROM alerts").fetchall()
        out = {}
        for r in rows:
            try:
                out[r[0]] = AlertRow(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4]), r[5], r[6], r[7], r[8],
                                     bool(r[9]), r[10], r[11], r[12], incident=r[13])
            except (ValueError, TypeError) as exc:
                log.error("alert %s in %s is damaged (%s); it is dropped", r[0], self.path, exc)
        return out

    def save_alerts(self, changed: List[AlertRow], deleted: List[str]) -> None:
        self.commit_alerts(changed, deleted, [])

    def commit_alerts(self, changed: Sequence[AlertRow], deleted: Sequence[str], items: Sequence[OutboxItem],
                      probe: bool = False, interruptions: Optional[Mapping[Tuple[str, str], int]] = None) -> None:
        """Alert state and the notifications it caused, in one transaction: a kill can never
        leave an alert marked as sent without its message queued (a lost page), nor the reverse.
        With `probe` the transaction writes even when nothing changed (the database header's
        user_version, set to itself): while the folder could not be written, only a real write
        tells that it can be again. `interruptions`: what the pass counted (InterruptionCounts)."""
        if self.unopened:
            # Never a commit to the stand-in in memory: the alerts would count as sent and their
            # pages be lost with it. The engine holds them and redoes the pass once `heal` opened it.
            raise sqlite3.OperationalError(f"the alert state cannot be opened: {self.unopened}")
        if not changed and not deleted and not items and not probe and not interruptions:
            return
        with self._tx() as db:
            if probe:
                version = int(db.execute("PRAGMA user_version").fetchone()[0])
                db.execute(f"PRAGMA user_version = {version}")
            self._enqueue(db, items)
            for a in changed:
                db.execute(
                    "INSERT OR REPLACE INTO alerts (fp, rule, severity, labels, finding, state, pending_since,"
                    " firing_since, last_seen, notified, last_notified, snapshot, muted, incident)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (a.fp, a.rule, a.severity, json.dumps(a.labels), json.dumps(a.finding, default=str), a.state,
                     a.pending_since, a.firing_since, a.last_seen, int(a.notified), a.last_notified,
                     a.snapshot, a.muted, a.incident))
            for fp in deleted:
                db.execute("DELETE FROM alerts WHERE fp=?", (fp,))
            self._add_interruptions(db, interruptions or {})

    # -- silences --------------------------------------------------------------------------
    def add_silence(self, matchers: List[str], starts_at: float, ends_at: float, created_by: str,
                    comment: str) -> Silence:
        s = Silence(uuid.uuid4().hex[:12], list(matchers), starts_at, ends_at, created_by, comment)
        with self._tx() as db:
            db.execute("INSERT INTO silences VALUES (?,?,?,?,?,?,?)",
                       (s.id, json.dumps(s.matchers), s.starts_at, s.ends_at, s.created_by, s.comment, s.created_at))
            self._silence_writes += 1
        return s

    def silences_version(self) -> tuple:
        """Changes whenever the silences may have changed: a commit by another connection (the
        `silence` CLI runs in its own process; `PRAGMA data_version` tells, without reading a
        table) or a silence write through this one. Lets the engine keep them in memory instead
        of querying the table at every evaluation."""
        with self._lock:
            return self._db.execute("PRAGMA data_version").fetchone()[0], self._silence_writes

    def silences(self) -> List[Silence]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, matchers, starts_at, ends_at, created_by, comment, created_at FROM silences"
                " ORDER BY created_at").fetchall()
        return [Silence(r[0], json.loads(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in rows]

    def remove_silence(self, sid: str) -> bool:
        """Delete a silence by id (or unique id prefix); True if one was removed."""
        with self._tx() as db:
            rows = db.execute("SELECT id FROM silences WHERE id LIKE ?", (sid + "%",)).fetchall()
            if len(rows) != 1:
                return False
            db.execute("DELETE FROM silences WHERE id=?", (rows[0][0],))
            self._silence_writes += 1
        return True

    def prune_silences(self, older_than: float) -> None:
        with self._tx() as db:
            if db.execute("DELETE FROM silences WHERE ends_at < ?", (older_than,)).rowcount:
                self._silence_writes += 1

"""The alert database damaged under the running daemon: set aside and rebuilt from memory.

Why: a file truncated or overwritten in place (`: > alerting.sqlite3`, a disk tool, a restore
gone wrong) makes every commit fail. Taken for a folder that cannot be written, it held every
new page in memory until someone restarted the daemon, though the folder was writable all along.
After a failed commit the engine asks `damaged` (a new read-only connection: are the tables
there, does SQLite's quick check pass); a damaged file is renamed aside as at start
(`statefiles.quarantine`, reported by `state_damaged`), a fresh database is made, and the engine's
memory, which holds every alert as last committed, and the silences in force are written into it.
The pass is then done again, so the page that met the damage is queued and sent once. Lost with
the file: notifications queued but not yet sent (the log says so) and the interruption counts.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from typing import Callable, ContextManager, Iterable, Optional

from watchdog.alerting.decide.records import AlertRow, Silence
from watchdog.service import statefiles

log = logging.getLogger("watchdog.alerts")
#: The tables without which the file is not the alert database (interruption counts may be added).
TABLES = ("alerts", "silences", "outbox")
#: SQLite's errors that tell of the disk or of another process, not of the file's content.
_STORAGE_CODES = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_BUSY",
                  "SQLITE_LOCKED", "SQLITE_PERM", "SQLITE_NOMEM")


def storage_fault(exc: BaseException) -> bool:
    """Whether an SQLite error is the storage's (full, read-only, locked) rather than damage."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(_STORAGE_CODES)


class DamageRebuild:
    """Mixed into AlertStore: tell a damaged database from an unwritable folder, and rebuild it."""

    path: str
    _db: sqlite3.Connection
    _lock: threading.RLock
    _open: Callable[[], None]
    _close_quietly: Callable[[], None]
    commit_alerts: Callable[..., None]
    _tx: Callable[[], ContextManager[sqlite3.Connection]]

    def damaged(self) -> Optional[str]:
        """Why the file is not a usable alert database now (None: it is, or the disk is at fault)."""
        try:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5.0)
        except sqlite3.Error:
            return None  # gone or unreadable: `heal` and the unwritable episode handle it
        try:
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            missing = sorted(set(TABLES) - names)
            if missing:
                return f"tables missing: {', '.join(missing)}"
            check = db.execute("PRAGMA quick_check").fetchall()
            return None if check == [("ok",)] else "integrity check: " + "; ".join(str(r[0]) for r in check[:3])
        except sqlite3.DatabaseError as exc:
            return None if storage_fault(exc) else str(exc)
        finally:
            db.close()

    def replace_damaged(self, reason: str, alerts: Iterable[AlertRow], silences: Iterable[Silence]) -> str:
        """Set the damaged file aside, start a fresh one and write `alerts` and `silences` into it."""
        with self._lock:
            self._close_quietly()
            kept = statefiles.quarantine(self.path, f"damaged under the running daemon: {reason}",
                                         ("-journal", "-wal", "-shm")).kept_as
            self._open()
            rows = list(alerts)
            self.commit_alerts(rows, [], [])
            kept_silences = list(silences)
            with self._tx() as db:
                for s in kept_silences:
                    db.execute("INSERT OR REPLACE INTO silences VALUES (?,?,?,?,?,?,?)",
                                     (s.id, json.dumps(s.matchers), s.starts_at, s.ends_at, s.created_by, s.comment,
                                      s.created_at))
            return (f"{self.path} was damaged under the running daemon ({reason}); set aside as {kept} and rebuilt "
                    f"from memory: {len(rows)} alerts and {len(kept_silences)} silences carried over; notifications "
                    "queued but not yet sent in it are lost")

"""The relay's memory: which job incidents it has already paged, committed in the same SQLite
transaction as the outbox rows of that page.

Why: Alertmanager sends a group again whenever it changes (a symptom joins, a peer takes over
after a failover, both HA peers race) and on every `repeat_interval`. On-call wants one message per
incident, so the relay remembers each incident it paged until Alertmanager says it resolved; a
restart keeps that memory, and a crash between commit and answer only makes Alertmanager retry a
payload the relay then recognises.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from watchdog.alerting.deliver.store import AlertStore

_SCHEMA = """CREATE TABLE IF NOT EXISTS relay_incidents (
    incident TEXT PRIMARY KEY, started REAL NOT NULL, state TEXT NOT NULL)"""


class RelayStore(AlertStore):
    """The alert store (outbox) plus one table of open incidents."""

    def __init__(self, state_dir: str):
        super().__init__(state_dir)
        with self._tx() as db:
            db.execute(_SCHEMA)

    def incident(self, key: str) -> Optional[Dict[str, Any]]:
        with self._lock:
            row = self._db.execute("SELECT started, state FROM relay_incidents WHERE incident=?", (key,)).fetchone()
        if row is None:
            return None
        return dict(json.loads(row[1]), started=row[0])

    def open_incidents(self) -> int:
        """Incidents paged and not resolved (resolved ones are remembered a while, not counted)."""
        with self._lock:
            rows = self._db.execute("SELECT state FROM relay_incidents").fetchall()
        return sum(1 for (state,) in rows if "resolved_at" not in json.loads(state))

    def commit(self, key: str, state: Dict[str, Any], items: List[tuple], forget_before: float) -> None:
        """Record the incident and enqueue its messages, atomically; forget incidents resolved
        before `forget_before`."""
        with self._tx() as db:
            body = {k: v for k, v in state.items() if k != "started"}
            db.execute("INSERT OR REPLACE INTO relay_incidents (incident, started, state) VALUES (?,?,?)",
                       (key, state["started"], json.dumps(body)))
            for channel, ikey, kind, msg in items:
                db.execute("INSERT INTO outbox (channel, created, ikey, kind, body, attempts, next_at)"
                           " VALUES (?,?,?,?,?,0,?)", (channel, msg["created"], ikey, kind, json.dumps(msg),
                                                       msg["created"]))
            for k, st in db.execute("SELECT incident, state FROM relay_incidents").fetchall():
                resolved = json.loads(st).get("resolved_at")
                if resolved is not None and resolved < forget_before:
                    db.execute("DELETE FROM relay_incidents WHERE incident=?", (k,))

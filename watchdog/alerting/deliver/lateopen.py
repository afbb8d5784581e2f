"""The alert state when its file cannot be opened at start (a full disk at boot, a state folder
read-only right after the database was made).

Why: exiting there is a restart loop under systemd that sends nothing, while a running daemon
whose folder fails keeps going (storagefault.py). So the store starts on an empty database in
memory that it only reads (`unopened` says why the file could not be opened); every commit of
alerts fails, so the engine holds its alerts in memory, rolls each pass back and sends
`state_unwritable` from memory, exactly as when a running daemon's folder turns read-only. The
engine's retries call `heal`, which opens the file (`open_late`) once it can; the held pages are
then committed and sent once.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from typing import Callable

log = logging.getLogger("watchdog.alerts")


class LateOpen:
    """Mixed into AlertStore: the stand-in in memory and the late open of the file."""

    path: str
    _db: sqlite3.Connection
    #: Why the database could not be opened at start ("" once it is).
    unopened: str
    _open: Callable[[], None]
    _connect: Callable[[str], sqlite3.Connection]
    _close_quietly: Callable[[], None]

    def _stand_in(self, exc: BaseException, schema: str) -> None:
        """Read an empty database in memory until the file can be opened."""
        self._close_quietly()
        self.unopened = f"{exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        self._db = self._connect(":memory:")
        self._db.executescript(schema)
        log.error("cannot open the alert state %s now (%s): alerts are held in memory and the file is opened "
                  "once it can be", self.path, self.unopened, extra={"event": "state_unwritable"})

    def _open_late(self) -> str:
        """Open the database a start-up could not; raises (OSError, sqlite3.Error) while it still
        cannot, leaving the stand-in in place."""
        folder = os.path.dirname(self.path) or "."
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)  # makedirs' mode passes through the umask
        memory = self._db
        try:
            self._open()
        except BaseException:
            if self._db is not memory:
                self._close_quietly()
            self._db = memory
            raise
        memory.close()
        self.unopened = ""
        return f"the alert state {self.path} could not be opened at start; it is opened now"

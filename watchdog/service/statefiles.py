"""Damaged state files: set aside (renamed, never deleted), reported, and replaced by fresh state.

A daemon that refuses to start over a corrupt `alerting.sqlite3` crash-loops under systemd and
leaves the node unwatched; one that deletes the file destroys the evidence. So a damaged file is
renamed to `<name>.corrupt-<UTC time>` next to itself, an error is logged, and the event is
recorded here for the `state_damaged` finding (watchdog/detectors/selfstate.py): the on-call learns
that alert history or log offsets were lost, and where the old file is.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

log = logging.getLogger("watchdog.state")


@dataclass(frozen=True)
class StateDamage:
    """One damaged state file: what it was, why it was refused and where it was kept."""

    file: str
    path: str
    reason: str
    kept_as: Optional[str]
    time: float


_lock = threading.Lock()
_events: List[StateDamage] = []


def quarantine(path: str, reason: str, siblings: Sequence[str] = ()) -> StateDamage:
    """Rename `path` (and `path + suffix` for each sibling suffix that exists) out of the way."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kept: Optional[str] = f"{path}.corrupt-{stamp}"
    n = 1
    while os.path.exists(kept):  # type: ignore[arg-type]
        n += 1
        kept = f"{path}.corrupt-{stamp}-{n}"
    try:
        os.replace(path, kept)  # type: ignore[arg-type]
        for suffix in siblings:
            if os.path.exists(path + suffix):
                os.replace(path + suffix, kept + suffix)  # type: ignore[operator]
    except OSError as exc:
        log.error("cannot set aside the damaged %s: %s", path, exc.strerror or exc)
        kept = None
    event = StateDamage(file=os.path.basename(path), path=path, reason=reason[:300], kept_as=kept, time=time.time())
    log.error("state file %s is damaged (%s); %s and starting with fresh state", path, event.reason,
              f"kept it as {kept}" if kept else "could not move it",
              extra={"event": "state_damaged", "file": event.file})
    with _lock:
        _events.append(event)
    return event


def events() -> Tuple[StateDamage, ...]:
    """Every damaged state file this process found (a handful at most: once per file per start)."""
    with _lock:
        return tuple(_events)


# -- small JSON state files -----------------------------------------------------------------------

def write_json(path: str, doc: Dict[str, Any], sync: bool = True) -> None:
    """Write atomically and privately: a temporary file (0600), renamed over the old one, so a
    crash at any moment leaves the old or the new content, never a torn file. `sync` fsyncs it
    first, which only a crash of the machine (not of the daemon: the page cache outlives it)
    needs; a failure removes the temporary file and raises OSError."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, json.dumps(doc).encode("utf-8"))
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)  # a full disk must not also keep a half-written file
        except OSError:
            pass
        raise


def read_json(path: str, version: int) -> Dict[str, Any]:
    """The `data` of a `{"version": version, "data": {...}}` file; {} when it is missing. A damaged
    file is set aside and reported like any other (`quarantine`); an unreadable one is logged."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        quarantine(path, f"unreadable JSON: {str(exc)[:200]}")
        return {}
    except OSError as exc:
        log.warning("state file %s unreadable (%s); starting without it", path, exc)
        return {}
    if not isinstance(doc, dict) or doc.get("version") != version or not isinstance(doc.get("data"), dict):
        quarantine(path, "not the expected document")
        return {}
    return doc["data"]

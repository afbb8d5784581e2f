"""Small JSON state files in the state directory: written atomically, private, read forgivingly.

A write goes to a temporary file (0600), is fsynced and renamed over the old one, so a crash or
SIGKILL at any moment leaves either the old or the new content, never a torn file. A missing,
unreadable or malformed file reads as empty (with a warning): state that helps after a restart
must never stop the daemon from starting.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict

log = logging.getLogger(__name__)


def write_json(path: str, doc: Dict[str, Any]) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps(doc).encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_json(path: str, version: int) -> Dict[str, Any]:
    """The document's `data` if the file holds `{"version": version, "data": {...}}`, else {}."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("state file %s unreadable (%s); starting without it", path, exc)
        return {}
    if not isinstance(doc, dict) or doc.get("version") != version or not isinstance(doc.get("data"), dict):
        log.warning("state file %s has an unknown layout; starting without it", path)
        return {}
    return doc["data"]

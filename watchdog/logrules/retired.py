"""Where the daemon stopped reading files it no longer follows: a relaunch that appends to them.

Why: a discovered job's files are followed for `discovery.forget_after` after the job is gone, then
forgotten. A job relaunched later into the same log folder (`>> train.log`, `tee -a`, a fixed
`--log-dir`) appends to the old files; read from their beginning, they would page the previous
run's OOM or HCCL timeout as this run's. So each file that leaves the followed set keeps its last
position here (device, inode, first-bytes fingerprint, offset, digest of the bytes before it),
and a file that comes back and is still that file (same identity, not rewritten from its start,
at least as long) is read on from that position.

Bounded (`MAX_RECORDS`, `KEEP_SECONDS`): cost does not grow with the node's history. Kept in its
own 0600 JSON file beside the offsets, written only when a file retires or comes back (the
offsets file is written after every round that read something; this one would make each such
write larger for nothing). A damaged or unreadable file is set aside and reported, never fatal:
the worst case is the old behaviour (a returning file read from its beginning).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Dict, Optional

from watchdog.service import statefiles

log = logging.getLogger(__name__)

FILE_NAME = "log-retired.json"
VERSION = 1
#: At most this many retired files are remembered (the oldest are dropped first).
MAX_RECORDS = 512
#: A retired file is remembered this long (a job relaunched a month later starts a new file).
KEEP_SECONDS = 30 * 86400.0
_INTS = ("dev", "ino", "offset", "fp_len", "tail_len")


def _valid(rec: Any) -> bool:
    """The shape `retire` writes: non-negative integers (a negative offset would make every read
    fail), a finite time, a string fingerprint."""
    if not isinstance(rec, dict):
        return False
    if not all(isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool) and rec[k] >= 0 for k in _INTS):
        return False
    at = rec.get("at")
    return (isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at)
            and isinstance(rec.get("fp", ""), str))


class RetiredFiles:
    """path -> the saved position of a file that left the followed set (see the module doc)."""

    def __init__(self, path: Optional[str]):
        self.path = path
        self.records: Dict[str, dict] = {}
        self._loaded = False
        self._dirty = False

    def load(self) -> None:
        """Read once; a damaged file is set aside (reported), a missing one is empty."""
        if self._loaded or not self.path:
            self._loaded = True
            return
        self._loaded = True
        try:
            doc = statefiles.load_json(self.path)
            if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("files"), dict):
                raise ValueError("not a retired-files document")
            self.records = {p: r for p, r in doc["files"].items() if isinstance(p, str) and _valid(r)}
            self._trim(time.time())  # a file written by hand or by a bigger limit: cut to size once
        except FileNotFoundError:
            return
        except ValueError as exc:
            statefiles.quarantine(self.path, f"retired log positions unreadable: {str(exc)[:200]}")
        except OSError as exc:
            log.warning("retired log positions in %s unreadable (%s); a relaunch appending to an old log "
                        "file is read from its beginning", self.path, exc.strerror or exc)

    def retire(self, path: str, record: dict, now: Optional[float] = None) -> None:
        """Remember where reading `path` stopped (`record` as the offsets file holds it)."""
        at = time.time() if now is None else now
        self.load()
        self.records.pop(path, None)
        self.records[path] = {**record, "at": at}
        self._dirty = True
        self._trim(at)

    def take(self, path: str) -> Optional[dict]:
        """The retired record of `path` (forgotten: it is followed again), or None."""
        self.load()
        rec = self.records.pop(path, None)
        if rec is not None:
            self._dirty = True
        return rec

    def _trim(self, now: float) -> None:
        """Drop what is older than KEEP_SECONDS (or stamped in the future: a clock stepped back)
        and keep the newest MAX_RECORDS; one pass, rebuilt (never deleting from the front in a
        loop, which is quadratic on a large dict)."""
        kept = [(p, r) for p, r in self.records.items() if -86400.0 <= now - float(r["at"]) <= KEEP_SECONDS]
        if len(kept) != len(self.records) or len(kept) > MAX_RECORDS:
            self.records = dict(kept[-MAX_RECORDS:])

    def save(self) -> None:
        """Write when something changed; raises OSError (the caller reports it with the offsets)."""
        if not self._dirty or not self.path:
            return
        statefiles.write_json(self.path, {"version": VERSION, "files": self.records}, sync=False)
        self._dirty = False

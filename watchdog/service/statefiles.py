"""Damaged state files: set aside (renamed, never deleted), reported, and replaced by fresh state.

A daemon that refuses to start over a corrupt `alerting.sqlite3` crash-loops under systemd and
leaves the node unwatched; one that deletes the file destroys the evidence. So a damaged file is
renamed to `<name>.corrupt-<UTC time>` next to itself, an error is logged, and the event is
recorded here for the `state_damaged` finding (watchdog/detectors/selfstate.py): the on-call learns
that alert history or log offsets were lost, and where the old file is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple

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


# -- writing files atomically ---------------------------------------------------------------------

@contextlib.contextmanager
def atomic_file(path: str, tmp: Optional[str] = None, mode: int = 0o600, sync: bool = False,
                exclusive: bool = False) -> Iterator[BinaryIO]:
    """Write `path` so that a crash at any moment leaves the old or the new content, never a torn
    file: yields the temporary file `tmp` (default `path + ".tmp"`, in the same folder) open for
    binary writing, created with exactly `mode` (the umask neither loosens nor tightens it), and
    renames it over `path` when the block ends. `sync` fsyncs it first, which only a crash of the
    machine (not of the daemon: the page cache outlives it) needs; `exclusive` refuses a leftover
    temporary file instead of truncating it. Any failure removes the temporary file (a full disk
    must not also keep a half-written one) and raises. Every file the daemon replaces goes
    through here: the JSON state files, the rebuilt alert database, evidence bundles, doctor
    records."""
    tmp = path + ".tmp" if tmp is None else tmp
    with _turn(tmp):
        with _replace(path, tmp, mode, sync, exclusive) as fh:
            yield fh


#: Two threads writing one file (a logs round saving its offsets while the shutdown closes the
#: probe, which saves them too) shared its temporary file: both truncated and wrote it, and the
#: one renamed in place could hold the shorter document followed by the tail of the longer one,
#: set aside as damaged at the next start (offsets lost). Writers of one temporary name take
#: turns: a lock per name while it is being written, dropped after, so the table holds only the
#: files being written now (evidence bundles have new names every time).
_turns: Dict[str, List[Any]] = {}
_turns_lock = threading.Lock()


@contextlib.contextmanager
def _turn(tmp: str) -> Iterator[None]:
    with _turns_lock:
        entry = _turns.setdefault(tmp, [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _turns_lock:
            entry[1] -= 1
            if entry[1] == 0:
                del _turns[tmp]


@contextlib.contextmanager
def _replace(path: str, tmp: str, mode: int, sync: bool, exclusive: bool) -> Iterator[BinaryIO]:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)
            fh = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise
        with fh:
            yield fh
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- small JSON state files -----------------------------------------------------------------------

def write_json(path: str, doc: Dict[str, Any], sync: bool = True) -> None:
    """Write atomically and privately (`atomic_file`, 0600); `sync` fsyncs first. A failure removes
    the temporary file and raises OSError."""
    with atomic_file(path, sync=sync) as fh:
        fh.write(json.dumps(doc).encode("utf-8"))


def save_probe_state(path: str, doc: Dict[str, Any], probe: str, what: str,
                     last_error: Optional[str]) -> Optional[str]:
    """Write a probe's state file (`write_json`, not synced: a crash of the machine is a new boot,
    whose state the probes drop anyway). Returns None when written, else the error text for the
    probe's status; the error is logged once per run of failures (`last_error` is the last one),
    not every round."""
    try:
        write_json(path, doc, sync=False)
    except OSError as exc:
        if last_error is None:
            log.error("%s probe: cannot save %s to %s: %s", probe, what, path, exc)
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return None


class SaveEpisode:
    """A state file that cannot be saved, said once per episode of failures (a full disk lasts: a
    warning every round would say nothing new) and once more when a save works again. `error` is
    the last failure's text while it lasts (a probe's observation carries it), None otherwise."""

    def __init__(self, what: str, path: str, logger: logging.Logger, consequence: str = ""):
        self.what, self.path, self.consequence = what, path, consequence
        self._log = logger
        self.error: Optional[str] = None

    def failed(self, exc: OSError) -> None:
        msg = f"cannot save {self.what} to {self.path}: {exc.strerror or exc}"
        if msg != self.error:
            self._log.warning("%s%s", msg, self.consequence)
        self.error = msg

    def saved(self) -> None:
        if self.error is not None:
            self._log.info("%s saved to %s again", self.what, self.path)
            self.error = None


#: A state file larger than this is refused (set aside): the daemon's own are a few hundred KB at
#: most, and a file grown by someone else must not cost the daemon its memory or a minute of CPU.
MAX_STATE_BYTES = 32 * 1024 * 1024


def load_json(path: str, max_bytes: int = MAX_STATE_BYTES) -> Any:
    """A state file's JSON, read without blocking or unbounded memory. Raises FileNotFoundError
    when it is missing, ValueError (its problem: not a regular file, a FIFO would block the reader
    forever and /dev/zero never ends; larger than `max_bytes`; unreadable JSON) when it is
    damaged, OSError when it cannot be opened or read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{st.st_size} bytes, more than the {max_bytes} a state file may hold")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"more than the {max_bytes} bytes a state file may hold")
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"unreadable JSON: {str(exc)[:200]}") from None


def read_json(path: str, version: int, max_bytes: int = MAX_STATE_BYTES) -> Dict[str, Any]:
    """The `data` of a `{"version": version, "data": {...}}` file; {} when it is missing. A damaged
    file (see `load_json`) is set aside and reported like any other (`quarantine`); one that
    cannot be opened is logged."""
    try:
        doc = load_json(path, max_bytes)
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        quarantine(path, str(exc))
        return {}
    except OSError as exc:
        log.warning("state file %s unreadable (%s); starting without it", path, exc)
        return {}
    if not isinstance(doc, dict) or doc.get("version") != version or not isinstance(doc.get("data"), dict):
        quarantine(path, "not the expected document")
        return {}
    return doc["data"]

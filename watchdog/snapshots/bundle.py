"""The in-memory bundle a capture fills, the budgeted task runner, and the archive writer.

Collection tasks run in parallel daemon threads. At the budget deadline the bundle is sealed: what
is there goes into the archive, late writers are ignored, and every task that did not finish is
listed in the manifest as missing. Daemon threads (not a ThreadPoolExecutor) so that a read stuck
on a dead NFS mount can never keep the daemon from exiting.
"""

from __future__ import annotations

import errno
import io
import os
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from watchdog.host.rankfiles import RankFileRefused
from watchdog.service.statefiles import atomic_file
from watchdog.host.subproc import CommandOutcome

# Reasons an item could not be collected (the manifest's vocabulary).
PERMISSION_DENIED = "permission_denied"
TIMEOUT = "timeout"
TOOL_ABSENT = "tool_absent"
NOT_FOUND = "not_found"
BUDGET_EXCEEDED = "budget_exceeded"
STOPPING = "stopping"
FAILED = "failed"
ERROR = "error"


class Bundle:
    """Files of one snapshot (name inside the archive -> bytes), sealed at the deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: Dict[str, bytes] = {}
        self._sealed = False
        self._secrets: List[str] = []

    def add(self, name: str, data: "bytes | str") -> bool:
        if isinstance(data, str):
            data = data.encode("utf-8", errors="surrogateescape")
        with self._lock:
            if self._sealed:
                return False
            base, n = name, 1
            while name in self._files:
                n += 1
                name = f"{base}.{n}"
            self._files[name] = data
            return True

    def add_secret(self, value: str) -> None:
        """A secret discovered while collecting (e.g. a token in a process environment)."""
        with self._lock:
            self._secrets.append(value)

    def seal(self) -> Tuple[Dict[str, bytes], List[str]]:
        with self._lock:
            self._sealed = True
            return dict(self._files), list(self._secrets)


@dataclass
class Problem:
    reason: str
    message: str
    what: str = ""


@dataclass
class Item:
    """One manifest entry: what was collected, how long it took, what failed and why."""

    name: str
    status: str = "ok"  # ok | partial | failed | missing
    files: List[str] = field(default_factory=list)
    duration_seconds: float = 0.0
    problems: List[Problem] = field(default_factory=list)
    note: str = ""

    def fail(self, reason: str, message: str, what: str = "") -> None:
        self.problems.append(Problem(reason, message, what))

    def to_dict(self) -> Dict[str, object]:
        d = asdict(self)
        if not self.note:
            d.pop("note")
        return d


def oserror_reason(exc: BaseException) -> str:
    if isinstance(exc, RankFileRefused):
        return exc.reason  # symlink, not_regular_file, wrong_owner: skipped, never read
    if isinstance(exc, PermissionError) or getattr(exc, "errno", None) in (errno.EACCES, errno.EPERM):
        return PERMISSION_DENIED
    if isinstance(exc, FileNotFoundError) or getattr(exc, "errno", None) == errno.ENOENT:
        return NOT_FOUND
    return ERROR


def outcome_problem(out: CommandOutcome, timeout: float) -> Optional[Problem]:
    """Why a command did not yield its output, or None when it did."""
    prog = os.path.basename(str(out.argv[0])) if out.argv else "command"
    if out.start_error:
        reason = PERMISSION_DENIED if "ermission" in out.start_error else TOOL_ABSENT
        return Problem(reason, f"cannot run {prog}: {out.start_error}")
    if out.timed_out:
        return Problem(TIMEOUT, f"{prog} did not finish within {timeout:g}s (process group killed)")
    if out.returncode != 0:
        text = (out.stderr.strip() or out.stdout.strip())[-500:]
        low = text.lower()
        reason = PERMISSION_DENIED if ("permission denied" in low or "not permitted" in low) else FAILED
        return Problem(reason, f"{prog} exited {out.returncode}: {text}")
    return None


@dataclass
class Task:
    """A named collection step; `fn(item)` fills the item and writes into the bundle."""

    name: str
    fn: Callable[[Item], None]


def run_tasks(tasks: List[Task], deadline: float, workers: int,
              cancel: Optional[threading.Event] = None) -> List[Item]:
    """Run tasks in parallel until done, `deadline` (monotonic) or `cancel`; unfinished ones come
    back missing (the daemon stopping must not wait for a collector stuck on a dead mount)."""
    cancel = cancel or threading.Event()
    results: Dict[int, Item] = {}
    started: Dict[int, float] = {}
    cond = threading.Condition()
    todo: "queue.Queue[Tuple[int, Task]]" = queue.Queue()
    for i, t in enumerate(tasks):
        todo.put((i, t))

    def worker() -> None:
        while True:
            try:
                i, t = todo.get_nowait()
            except queue.Empty:
                return
            if time.monotonic() >= deadline or cancel.is_set():
                continue
            with cond:
                started[i] = time.monotonic()
            item = Item(t.name)
            t0 = time.monotonic()
            try:
                t.fn(item)
            except OSError as exc:
                item.fail(oserror_reason(exc), f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
            except Exception as exc:  # a collector bug must not lose the rest of the snapshot
                item.fail(ERROR, f"{type(exc).__name__}: {exc}")
            item.duration_seconds = round(time.monotonic() - t0, 3)
            if item.problems and item.status == "ok":
                item.status = "partial" if item.files else "failed"
            with cond:
                results[i] = item
                cond.notify_all()

    for _ in range(max(1, min(workers, len(tasks)))):
        threading.Thread(target=worker, name="snapshot-collect", daemon=True).start()
    with cond:
        while len(results) < len(tasks):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or cancel.is_set():
                break
            cond.wait(min(remaining, 0.2))
        out: List[Item] = []
        now = time.monotonic()
        for i, t in enumerate(tasks):
            if i in results:
                out.append(results[i])
                continue
            item = Item(t.name, status="missing")
            if cancel.is_set():
                item.fail(STOPPING, "the daemon was stopping")
            elif i in started:
                item.duration_seconds = round(now - started[i], 3)
                item.fail(BUDGET_EXCEEDED, "still running when the snapshot time budget ran out")
            else:
                item.fail(BUDGET_EXCEEDED, "not started before the snapshot time budget ran out")
            out.append(item)
    return out


def write_archive(final_path: str, top: str, files: Dict[str, bytes], file_mode: int,
                  mtime: Optional[float] = None) -> int:
    """Write a tar.gz under a temporary name in the same directory, then rename it into place.

    Readers (and retention) never see a half-written archive: the name only exists once complete.
    Returns the archive's size.
    """
    directory, base = os.path.split(final_path)
    tmp = os.path.join(directory, f".{base}.partial")
    mtime = time.time() if mtime is None else mtime
    # exclusive: a leftover of a crashed write is refused, not overwritten; the mode is exactly
    # the configured one whatever the umask
    # Imported here: a snapshot is rare, and tarfile with its compression modules is 0.4 MB of
    # resident memory an idle daemon would otherwise carry all its life.
    import tarfile

    with atomic_file(final_path, tmp=tmp, mode=file_mode, sync=True, exclusive=True) as fh:
        with tarfile.open(fileobj=fh, mode="w:gz") as tar:
            dinfo = tarfile.TarInfo(top)
            dinfo.type = tarfile.DIRTYPE
            dinfo.mode = 0o700
            dinfo.mtime = int(mtime)
            tar.addfile(dinfo)
            for name in sorted(files):
                data = files[name]
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size = len(data)
                info.mode = 0o600
                info.mtime = int(mtime)
                tar.addfile(info, io.BytesIO(data))
    return os.stat(final_path).st_size

"""Run an external command with a hard timeout; on expiry kill its whole process group.

`subprocess.run(timeout=...)` kills only the direct child; a wedged `npu-smi` (or a shell script
that spawned a `sleep`) would leave grandchildren holding the pipes open and block the read
forever. Starting a new session and killing the group avoids that. Never uses a shell.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Set, Tuple

from watchdog.host import turns


@dataclass(frozen=True)
class CommandOutcome:
    argv: tuple
    returncode: Optional[int]
    stdout: str
    stderr: str
    duration: float
    timed_out: bool
    #: Set when the program could not be started at all (e.g. not found, permission denied).
    start_error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.start_error is None and not self.timed_out and self.returncode == 0


#: Commands running now. Each runs in its own session, so stopping the daemon would leave them
#: behind (a hung npu-smi, a command check): `kill_all()` at shutdown ends them with their groups.
_LIVE: Set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def kill_all() -> int:
    """Kill every running command's process group; returns how many there were."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        _kill_group(proc)
    return len(procs)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


#: After the command itself exits, how long its pipes are still drained at most. A descendant it
#: left in the background (a wrapper's helper, `cmd &`) may hold stdout open for hours; the
#: command is done when it exits, so what it wrote is in the pipe already. The drain ends as soon
#: as the pipes have been quiet for _QUIET_SECONDS.
EXIT_DRAIN_SECONDS = 1.0
_QUIET_SECONDS = 0.1

#: How often the command's exit is checked while its pipes are quiet, where no pidfd exists.
_POLL_SECONDS = 0.05


def _exit_fd(proc: subprocess.Popen) -> Optional[int]:
    """A descriptor that becomes readable when `proc` exits (Linux pidfd), or None: then poll."""
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return None


def _collect(proc: subprocess.Popen, deadline: float, max_output: int) -> Tuple[bytes, bytes, bool]:
    """Read stdout and stderr until the command exits (plus a short drain) or the deadline passes.

    Why not `communicate()`: it returns at end-of-file on both pipes, which a descendant that
    inherited them (and outlives the command) postpones indefinitely, so a command that answered
    in 0.5 s and exited 0 would look hung. Output beyond `max_output` is read and dropped, so the
    writer is never blocked on a full pipe. Returns (stdout, stderr, timed_out).
    """
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs: Dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    exit_fd = _exit_fd(proc)
    if exit_fd is not None:
        sel.register(exit_fd, selectors.EVENT_READ)
    try:
        timed_out = _pump(proc, sel, bufs, exit_fd, deadline, max_output)
    finally:
        sel.close()
        if exit_fd is not None:
            os.close(exit_fd)
        proc.stdout.close()
        proc.stderr.close()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), timed_out


def _pump(proc: subprocess.Popen, sel: selectors.BaseSelector, bufs: Dict[int, bytearray],
          exit_fd: Optional[int], deadline: float, max_output: int) -> bool:
    """The read loop of _collect; returns whether the deadline passed before the command exited."""
    drain_until: Optional[float] = None
    while True:
        now = time.monotonic()
        if drain_until is None and proc.poll() is not None:
            drain_until = now + EXIT_DRAIN_SECONDS
            if exit_fd is not None:
                sel.unregister(exit_fd)
                exit_fd = None
        pipes_open = any(fd in bufs for fd in sel.get_map())
        if drain_until is not None and (now >= drain_until or not pipes_open):
            return False
        if drain_until is None and now >= deadline:
            _kill_group(proc)
            _drain_after_kill(proc, sel, bufs, max_output)
            return True
        if drain_until is not None:
            wait = min(_QUIET_SECONDS, drain_until - now)
        elif exit_fd is not None:
            wait = deadline - now  # the pidfd wakes the select when the command exits
        else:
            wait = min(_POLL_SECONDS, deadline - now)
        events = sel.select(max(wait, 0.0))
        if drain_until is not None and not events:
            return False  # exited, and its pipes are quiet: only a descendant holds them
        for key, _ in events:
            if key.fd in bufs:
                _read_some(sel, key.fd, bufs[key.fd], max_output)


def _drain_after_kill(proc: subprocess.Popen, sel: selectors.BaseSelector, bufs: Dict[int, bytearray],
                      max_output: int) -> None:
    """After a kill: what the group wrote is still read for up to 2 s, and the command is reaped.

    A child in uninterruptible sleep (D state) may not die at once; then the pipes are given up.
    """
    until = time.monotonic() + 2.0
    while any(fd in bufs for fd in sel.get_map()):
        left = until - time.monotonic()
        if left <= 0:
            break
        for key, _ in sel.select(min(left, _POLL_SECONDS)):
            if key.fd in bufs:
                _read_some(sel, key.fd, bufs[key.fd], max_output)
    try:
        proc.wait(timeout=max(until - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        pass


def _read_some(sel: selectors.BaseSelector, fd: int, buf: bytearray, max_output: int) -> None:
    """One read from a ready pipe; at end-of-file it leaves the selector. Keeps max_output bytes."""
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        return
    except OSError:
        chunk = b""
    if not chunk:
        sel.unregister(fd)
        return
    room = max_output - len(buf)
    if room > 0:
        buf += chunk[:room]


def run_command(
    argv: Sequence[str],
    timeout: float,
    env: Optional[Mapping[str, str]] = None,
    max_output: int = 4 * 1024 * 1024,
    cwd: Optional[str] = None,
) -> CommandOutcome:
    """Run `argv` (no shell), return its output; never raises for the command's own failures."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, env=dict(env) if env is not None else None, cwd=cwd,
        )
    except OSError as exc:
        return CommandOutcome(tuple(argv), None, "", "", time.monotonic() - start, False,
                              start_error=f"{exc.strerror or exc}: {argv[0]}")
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        with turns.waiting():  # another probe round runs while this one waits for the command
            out, err, timed_out = _collect(proc, start + timeout, max_output)
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    duration = time.monotonic() - start
    return CommandOutcome(
        argv=tuple(argv),
        returncode=None if timed_out else proc.returncode,
        stdout=out.decode("utf-8", errors="replace"),
        stderr=err.decode("utf-8", errors="replace"),
        duration=duration,
        timed_out=timed_out,
    )

"""Run an external command with a hard timeout; on expiry kill its whole process group.

`subprocess.run(timeout=...)` kills only the direct child; a wedged `npu-smi` (or a shell script
that spawned a `sleep`) would leave grandchildren holding the pipes open and block the read
forever. Starting a new session and killing the group avoids that. Never uses a shell.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Set


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
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=2.0)
        except subprocess.TimeoutExpired:
            # A child in uninterruptible sleep (D state) may not die at once; give up on the pipes.
            out, err = b"", b""
        timed_out = True
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    duration = time.monotonic() - start
    return CommandOutcome(
        argv=tuple(argv),
        returncode=None if timed_out else proc.returncode,
        stdout=out[:max_output].decode("utf-8", errors="replace"),
        stderr=err[:max_output].decode("utf-8", errors="replace"),
        duration=duration,
        timed_out=timed_out,
    )

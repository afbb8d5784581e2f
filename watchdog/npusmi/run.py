"""Run npu-smi with a hard timeout and turn every way it can fail into one clear error.

Why: npu-smi talks to the driver; a wedged driver or device makes it hang, a container without
the device makes it print `dcmi ... failed ... ret is -8020`, an upgrade changes its table. Each of
these must end the call quickly (process-group kill), be counted by reason, and surface as a
specific message whose prefix the npu-smi health detectors (and people) can read. None of them may
ever look like "this node has zero NPUs".
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, TypeVar

from watchdog.npusmi.parse import (
    ChipMapEntry,
    HealthInfo,
    NpuSmiError,
    NpuSmiParseError,
    NpuSmiUnavailable,
    detect_failure,
    parse_chip_map,
    parse_health,
    parse_info,
)
from watchdog.observations import NpuObservation
from watchdog.host.subproc import run_command

#: Failure reasons, as in the `npu_watchdog_npu_smi_failures_total{reason}` metric.
REASONS = ("timeout", "exit", "parse", "unavailable", "missing")

#: Message prefix of each reason: the probe's error text starts with it (for people; detectors
#: read the reason itself, ProbeStatus.reason).
PREFIX = {
    "timeout": "npu-smi hung:",
    "exit": "npu-smi failing:",
    "parse": "npu-smi output unreadable:",
    "unavailable": "npu-smi unavailable:",
    "missing": "npu-smi missing:",
}


class NpuSmiRunError(NpuSmiError):
    """One failed npu-smi call: `reason` is one of REASONS, the message starts with its PREFIX."""

    def __init__(self, reason: str, detail: str, duration: float = 0.0):
        assert reason in REASONS
        self.reason = reason
        self.detail = detail
        self.duration = duration
        super().__init__(f"{PREFIX[reason]} {detail}")


@dataclass
class NpuSmiStats:
    """Process-wide call statistics (one daemon, one npu-smi): counters survive config reloads."""

    calls: int = 0
    failures: Dict[str, int] = field(default_factory=lambda: {r: 0 for r in REASONS})
    last_duration: Optional[float] = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, duration: float, reason: Optional[str] = None, info_call: bool = True) -> None:
        with self._lock:
            self.calls += 1
            if info_call:
                self.last_duration = duration
            if reason is not None:
                self.failures[reason] = self.failures.get(reason, 0) + 1

    def snapshot(self) -> "NpuSmiStats":
        with self._lock:
            return NpuSmiStats(self.calls, dict(self.failures), self.last_duration)


STATS = NpuSmiStats()


def resolve(program: str) -> Optional[str]:
    """Absolute path of the npu-smi program (a name on PATH or a path), or None if not runnable."""
    if os.sep in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program)


def _missing(program: str) -> NpuSmiRunError:
    where = "does not exist or is not executable" if os.sep in program else "is not on PATH"
    return NpuSmiRunError(
        "missing", f"{program!r} {where}; install the Ascend driver (npu-smi is usually "
                   f"/usr/local/bin/npu-smi) or set probes.npu.npu_smi to its absolute path")


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "(no output)"


def call(program: str, args: List[str], timeout: float) -> str:
    """Run `program args...` (no shell, hard timeout); return stdout or raise NpuSmiRunError."""
    path = resolve(program)
    if path is None:
        raise _missing(program)
    out = run_command([path, *args], timeout=timeout)
    reason: Optional[str] = None
    detail = ""
    if out.start_error is not None:
        reason, detail = "missing", f"cannot start {program!r}: {out.start_error}"
    elif out.timed_out:
        reason, detail = "timeout", (f"`npu-smi {' '.join(args)}` gave no answer within {timeout:g}s and its "
                                     "process group was killed (driver or device wedged?)")
    else:
        failure = detect_failure(out.stdout + "\n" + out.stderr)
        if failure is not None:
            reason, detail = "unavailable", f"{failure} (exit code {out.returncode})"
        elif out.returncode != 0:
            reason, detail = "exit", f"exit code {out.returncode}: {_first_line(out.stderr or out.stdout)}"
    if reason is not None:
        raise NpuSmiRunError(reason, detail, out.duration)
    return out.stdout


def query_info(program: str, timeout: float, stats: Optional[NpuSmiStats] = STATS) -> NpuObservation:
    """`npu-smi info`, parsed; raises NpuSmiRunError for every failure (parse errors included)."""
    start = time.monotonic()
    try:
        obs = parse_info(call(program, ["info"], timeout))
    except NpuSmiRunError as exc:
        if stats is not None:
            stats.record(exc.duration, exc.reason)
        raise
    except NpuSmiUnavailable as exc:
        err = NpuSmiRunError("unavailable", exc.reason, time.monotonic() - start)
    except NpuSmiParseError as exc:
        err = NpuSmiRunError("parse", str(exc), time.monotonic() - start)
    else:
        duration = time.monotonic() - start
        if stats is not None:
            stats.record(duration)
        return replace(obs, duration_seconds=duration)
    if stats is not None:
        stats.record(err.duration, err.reason)
    raise err


def query_health(program: str, npu: int, chip: int, timeout: float,
                 stats: Optional[NpuSmiStats] = STATS) -> HealthInfo:
    """`npu-smi info -t health -i <npu> -c <chip>`, parsed; raises NpuSmiRunError."""
    args = ["info", "-t", "health", "-i", str(npu), "-c", str(chip)]
    return _query(program, args, parse_health, timeout, stats)


def query_chip_map(program: str, timeout: float, stats: Optional[NpuSmiStats] = STATS) -> Dict[int, ChipMapEntry]:
    """`npu-smi info -m`, parsed (chip logic id -> NPU ID and chip); raises NpuSmiRunError."""
    return _query(program, ["info", "-m"], parse_chip_map, timeout, stats)


T = TypeVar("T")


def _query(program: str, args: List[str], parse: Callable[[str], T], timeout: float,
           stats: Optional[NpuSmiStats]) -> T:
    """A secondary npu-smi call (not `info`): every failure becomes an NpuSmiRunError."""
    start = time.monotonic()
    try:
        result = parse(call(program, args, timeout))
    except NpuSmiRunError as exc:
        err = exc
    except NpuSmiUnavailable as exc:
        err = NpuSmiRunError("unavailable", exc.reason, time.monotonic() - start)
    except NpuSmiParseError as exc:
        err = NpuSmiRunError("parse", str(exc), time.monotonic() - start)
    else:
        if stats is not None:
            stats.record(time.monotonic() - start, info_call=False)
        return result
    if stats is not None:
        stats.record(err.duration, err.reason, info_call=False)
    raise err

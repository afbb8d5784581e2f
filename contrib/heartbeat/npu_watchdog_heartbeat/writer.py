"""One rank's heartbeat file (and its flight recorder): atomic, throttled, phase-aware, never raising.

Guarantees the training loop can rely on:
- Atomic: each write goes to a temp file in the same directory, then os.replace(); a reader
  never sees a half-written file.
- Cheap: at most one file write per `min_interval` seconds (phase changes, the first step and
  the first non-finite loss or grad norm are written at once). Every step also goes into the
  flight recorder, which is a store into a shared memory mapping, not a write.
- Harmless: it never raises into the loop. An I/O error (full disk, vanished mount) is swallowed
  and counted in `errors` (the last one in `last_error`); the watchdog then sees a stale
  heartbeat, which is the truth.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import threading
import time
from typing import Any, Dict, Iterator, Optional

from npu_watchdog_heartbeat import paths
from npu_watchdog_heartbeat.ring import DEFAULT_CAPACITY, FlightRecorder

PHASES = ("init", "train", "eval", "checkpoint", "done")
_NUMERIC = ("loss", "grad_norm", "loss_scale", "lr", "tokens_per_s", "samples_per_s")


def _plain(value: Any) -> Any:
    """Tensors and numpy scalars become Python numbers, without importing torch or numpy."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            return str(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


class Heartbeat:
    """One rank's heartbeat file. Thread-safe; every public method is exception-free.

    `path` may hold `{rank}`; None reads the NPU_WATCHDOG_HEARTBEAT contract (see `paths`), and
    with neither the object is inert (`enabled` False), so library code can always create one.
    """

    def __init__(self, path: Optional[str] = None, rank: Optional[int] = None, min_interval: float = 10.0,
                 phase: str = "init", clock: Any = time.time, flight_recorder: bool = True,
                 ring_capacity: int = DEFAULT_CAPACITY, seed: Optional[int] = None):
        self.rank = rank if rank is not None else paths.env_rank()
        self.path = paths.resolve(path, self.rank)
        self.enabled = self.path is not None
        self.min_interval = float(min_interval)
        self.errors = 0
        self.writes = 0
        self.last_error: Optional[str] = None
        self.seed = seed
        self._clock = clock
        self._lock = threading.Lock()
        self._state: Dict[str, Any] = {"phase": phase}
        self._last_write = -math.inf
        self._wrote_step = False
        self._wrote_nonfinite = False
        self.recorder: Optional[FlightRecorder] = None
        if self.enabled and flight_recorder:
            self.recorder = FlightRecorder(paths.ring_path(self.path), ring_capacity, self.rank)
        if seed is not None:
            self._state["seed"] = int(seed)
        self._write(force=True)

    # -- public API ------------------------------------------------------------------------
    def beat(self, step: Optional[int] = None, **fields: Any) -> bool:
        """Record progress; the file is written if `min_interval` has passed since the last write.

        Known fields: loss, grad_norm, loss_scale, lr, tokens_per_s, samples_per_s, skipped; any
        other keyword is written as-is. Every call with a step also goes into the flight recorder.
        Returns True when the file was written now.
        """
        if not self.enabled:
            return False
        try:
            with self._lock:
                if step is not None:
                    self._state["step"] = int(_plain(step))
                for k, v in fields.items():
                    self._state[k] = _plain(v)
                if step is not None:
                    self._record()
                # The first step is written at once (the loop runs), and so is the first NaN/inf:
                # the watchdog must learn of a divergence before a crash can swallow it.
                bad = not all(_finite(self._state.get(k)) for k in ("loss", "grad_norm"))
                force = ("step" in self._state and not self._wrote_step) or (bad and not self._wrote_nonfinite)
                self._wrote_nonfinite = self._wrote_nonfinite or bad
                return self._write(force=force)
        except Exception as exc:  # never into the training loop
            self._count(exc)
            return False

    def phase_now(self, name: str) -> None:
        """Switch phase and write at once (a phase change must not wait for the throttle)."""
        try:
            with self._lock:
                if self._state.get("phase") != name:
                    self._state["phase"] = name
                    self._write(force=True)
        except Exception as exc:
            self._count(exc)

    @property
    def current_phase(self) -> Optional[str]:
        return self._state.get("phase")

    @contextlib.contextmanager
    def phase(self, name: str, after: Optional[float] = None) -> Iterator["Heartbeat"]:
        """`with hb.phase("checkpoint"):` declares a long quiet stretch; the previous phase returns after.

        With `after=s` the phase is declared only if the block is still running `s` seconds in
        (a timer thread writes it): for hooks that usually return at once and only sometimes
        save, so the common case costs no write and no phase flapping.
        """
        previous = self._state.get("phase", "train")
        timer = None
        if after is None:
            self.phase_now(name)
        else:
            timer = threading.Timer(after, self.phase_now, args=(name,))
            timer.daemon = True
            timer.start()
        try:
            yield self
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()
            if self._state.get("phase") == name:
                self.phase_now(previous if previous != name else "train")

    def done(self) -> None:
        """The job finished normally: the watchdog resolves and silences liveness alerts."""
        self.phase_now("done")

    def flush(self) -> None:
        """Write pending values now (e.g. before a step that may take long)."""
        try:
            with self._lock:
                self._write(force=True)
        except Exception as exc:
            self._count(exc)

    # -- internals -------------------------------------------------------------------------
    def _count(self, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"

    def _record(self) -> None:
        if self.recorder is None:
            return
        s = self._state
        unit = "tokens_per_s" if s.get("tokens_per_s") is not None else (
            "samples_per_s" if s.get("samples_per_s") is not None else None)
        self.recorder.record({
            "step": s.get("step"), "time": self._clock(), "loss": s.get("loss"), "lr": s.get("lr"),
            "grad_norm": s.get("grad_norm"), "loss_scale": s.get("loss_scale"),
            "throughput": s.get(unit) if unit else None, "unit": unit, "seed": s.get("seed"),
            "phase": s.get("phase"), "skipped": bool(s.get("skipped")),
        })

    def _write(self, force: bool) -> bool:
        if not self.enabled:
            return False
        now = self._clock()
        if not force and now - self._last_write < self.min_interval:
            return False
        record = dict(self._state)
        record["time"] = now
        record["pid"] = os.getpid()
        if self.rank is not None:
            record["rank"] = self.rank
        directory = os.path.dirname(os.path.abspath(self.path))
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".hb-", suffix=".tmp", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                # NaN/inf are written as NaN/Infinity on purpose: the watchdog alerts on them.
                fh.write(json.dumps(record, default=str) + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
            tmp = None
        except Exception as exc:
            self._count(exc)
            return False
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        self._last_write = now
        self._wrote_step = self._wrote_step or "step" in record
        self.writes += 1
        return True

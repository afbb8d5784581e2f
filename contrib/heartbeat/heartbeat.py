"""Trainer-side heartbeat writer for npu-watchdog. Standard library only: copy this file anywhere.

    from heartbeat import Heartbeat

    hb = Heartbeat("/data/job/hb/rank{rank}.json")      # {rank} from RANK / LOCAL_RANK
    hb.phase_now("train")
    for step, batch in enumerate(loader):
        loss = train_step(batch)
        hb.beat(step=step, loss=float(loss), grad_norm=gn, tokens_per_s=tps)
        if step % 1000 == 0:
            with hb.phase("checkpoint"):                    # written at once, on entry and exit
                save_checkpoint()
    hb.done()

Guarantees the training loop can rely on:
- Atomic: each write goes to a temp file in the same directory, then os.replace(); a reader
  never sees a half-written file.
- Cheap: at most one write per `min_interval` seconds (phase changes and the first step are
  written at once).
- Harmless: it never raises into the loop. An I/O error (full disk, vanished mount) is swallowed
  and counted in `hb.errors` (the last one in `hb.last_error`); the watchdog then sees a stale
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

__all__ = ["Heartbeat", "PHASES"]

PHASES = ("init", "train", "eval", "checkpoint", "done")


def _env_rank() -> Optional[int]:
    for key in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return None


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


class Heartbeat:
    """One rank's heartbeat file. Thread-safe; every public method is exception-free."""

    def __init__(self, path: str, rank: Optional[int] = None, min_interval: float = 10.0,
                 phase: str = "init", clock: Any = time.time):
        self.rank = rank if rank is not None else _env_rank()
        self.path = path.format(rank=self.rank if self.rank is not None else 0)
        self.min_interval = float(min_interval)
        self.errors = 0
        self.writes = 0
        self.last_error: Optional[str] = None
        self._clock = clock
        self._lock = threading.Lock()
        self._state: Dict[str, Any] = {"phase": phase}
        self._last_write = -math.inf
        self._pending = False
        self._wrote_step = False
        self._write(force=True)

    # -- public API ------------------------------------------------------------------------
    def beat(self, step: Optional[int] = None, **fields: Any) -> bool:
        """Record progress; written if `min_interval` has passed since the last write.

        Known fields: loss, grad_norm, loss_scale, tokens_per_s, samples_per_s; any other keyword
        is written as-is. Returns True when the file was written now.
        """
        try:
            with self._lock:
                if step is not None:
                    self._state["step"] = int(step)
                for k, v in fields.items():
                    self._state[k] = _plain(v)
                self._pending = True
                # The first step is written at once: it shows the loop is running.
                return self._write(force="step" in self._state and not self._wrote_step)
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

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator["Heartbeat"]:
        """`with hb.phase("checkpoint"):` declares a long quiet stretch; the previous phase returns after."""
        previous = self._state.get("phase", "train")
        self.phase_now(name)
        try:
            yield self
        finally:
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

    def _write(self, force: bool) -> bool:
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
        self._pending = False
        self._wrote_step = self._wrote_step or "step" in record
        self.writes += 1
        return True

"""A HuggingFace `transformers.TrainerCallback` that writes an npu-watchdog heartbeat.

    from hf_callback import WatchdogHeartbeatCallback
    trainer = Trainer(..., callbacks=[WatchdogHeartbeatCallback("/data/job/hb/rank{rank}.json")])

Each process writes its own file ({rank} from RANK / LOCAL_RANK). Phases: `init` until training
begins, `train`, `eval` around evaluation, `checkpoint` around saves, `done` at the end. The
transformers import is optional so this file can be imported (and tested) without it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Dict, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heartbeat import Heartbeat  # noqa: E402

try:  # pragma: no cover - depends on the trainer's environment
    from transformers import TrainerCallback as _Base
except Exception:  # transformers missing: the same hooks, duck-typed
    _Base = object


class WatchdogHeartbeatCallback(_Base):  # type: ignore[misc,valid-type]
    def __init__(self, path: str, min_interval: float = 10.0, tokens_per_step: Optional[int] = None):
        self.hb = Heartbeat(path, min_interval=min_interval, phase="init")
        self.tokens_per_step = tokens_per_step
        self._step_started = None  # type: Optional[float]
        self._last: Dict[str, Any] = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hb.phase_now("train")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_started = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        fields: Dict[str, Any] = dict(self._last)
        if self._step_started is not None and self.tokens_per_step:
            took = time.monotonic() - self._step_started
            if took > 0:
                fields["tokens_per_s"] = self.tokens_per_step / took
        self.hb.beat(step=getattr(state, "global_step", None), **fields)
        # The Trainer evaluates / saves right after this hook when these flags are set: declare
        # the quiet stretch now so a long save is not mistaken for a hang.
        if getattr(control, "should_save", False):
            self.hb.phase_now("checkpoint")
        elif getattr(control, "should_evaluate", False):
            self.hb.phase_now("eval")

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None,
               **kwargs: Any) -> None:
        # HF logs {'loss': nan, 'grad_norm': ...} every logging_steps: keep them for the next beat.
        for key in ("loss", "grad_norm", "loss_scale"):
            if logs and key in logs:
                try:
                    self._last[key] = float(logs[key])
                except (TypeError, ValueError):
                    self._last[key] = math.nan
        if logs and any(k in logs for k in ("loss", "grad_norm")):
            self.hb.beat(step=getattr(state, "global_step", None), **self._last)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Evaluation has finished (a save may follow: on_save or the next step resets the phase).
        self.hb.phase_now("checkpoint" if getattr(control, "should_save", False) else "train")

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hb.phase_now("eval")
        self.hb.beat()  # throttled: keeps a long evaluation visibly alive

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Called after the checkpoint is written; the save itself runs between on_step_end and here.
        self.hb.phase_now("train")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hb.done()

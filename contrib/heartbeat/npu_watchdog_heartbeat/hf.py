"""HuggingFace `transformers.Trainer`: a `TrainerCallback` writing the heartbeat of each rank.

    from npu_watchdog_heartbeat.hf import WatchdogCallback
    trainer.add_callback(WatchdogCallback())      # path from NPU_WATCHDOG_HEARTBEAT

Phases: `init` until training begins, `train`, `eval` while evaluating, `checkpoint` while saving,
`done` at the end. Throughput is work over the wall time between consecutive step ends, so a
slow data loader shows (the time between `on_step_begin` and `on_step_end` excludes it). The work
is, first found: tokens seen (`include_num_input_tokens_seen`), `tokens_per_step`, else samples
(`per_device_train_batch_size x gradient_accumulation_steps`, as `samples_per_s`).
The transformers import is optional so the module imports (and is tested) without it.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from npu_watchdog_heartbeat.pace import Pace
from npu_watchdog_heartbeat.writer import Heartbeat

try:  # pragma: no cover - depends on the trainer's environment
    from transformers import TrainerCallback as _Base
except Exception:  # transformers missing: the same hooks, duck-typed
    class _Base:  # type: ignore[no-redef]
        """Every `TrainerCallback` event as a no-op, so any caller of the real interface works."""


    def _noop(self: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        return None

    for _event in ("on_init_end", "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
                   "on_step_begin", "on_pre_optimizer_step", "on_optimizer_step", "on_substep_end",
                   "on_step_end", "on_evaluate", "on_predict", "on_save", "on_log", "on_prediction_step"):
        setattr(_Base, _event, _noop)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


class WatchdogCallback(_Base):  # type: ignore[misc,valid-type]
    """Heartbeat + flight recorder from the Trainer's hooks (one instance per process)."""

    def __init__(self, path: Optional[str] = None, min_interval: float = 10.0,
                 tokens_per_step: Optional[int] = None, heartbeat: Optional[Heartbeat] = None):
        self.hb = heartbeat or Heartbeat(path, min_interval=min_interval, phase="init")
        self.tokens_per_step = tokens_per_step
        self.pace = Pace()
        self._last: Dict[str, Any] = {}
        self._tokens_seen: Optional[int] = None

    def _work(self, args: Any, state: Any) -> tuple:
        seen = getattr(state, "num_input_tokens_seen", None)
        if isinstance(seen, int) and seen > 0:
            before, self._tokens_seen = self._tokens_seen, seen
            return "tokens_per_s", (seen - before) if before is not None else None
        if self.tokens_per_step:
            return "tokens_per_s", self.tokens_per_step
        batch = getattr(args, "per_device_train_batch_size", None)
        accum = getattr(args, "gradient_accumulation_steps", 1) or 1
        return "samples_per_s", (batch * accum) if isinstance(batch, int) else None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hb.phase_now("train")
        self._tokens_seen = getattr(state, "num_input_tokens_seen", None) or None
        self.pace.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        unit, amount = self._work(args, state)
        rate = self.pace.step_end(amount)
        fields: Dict[str, Any] = dict(self._last)
        if rate is not None:
            fields[unit] = rate
        self.hb.beat(step=getattr(state, "global_step", None), **fields)
        # The Trainer evaluates / saves right after this hook when these flags are set: declare
        # the quiet stretch now so a long save is not mistaken for a hang.
        if getattr(control, "should_evaluate", False):
            self.hb.phase_now("eval")
        elif getattr(control, "should_save", False):
            self.hb.phase_now("checkpoint")

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None,
               **kwargs: Any) -> None:
        # HF logs {'loss': ..., 'grad_norm': ..., 'learning_rate': ...} every logging_steps.
        if not logs or not any(k in logs for k in ("loss", "grad_norm")):
            return
        for key, name in (("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "lr")):
            if key in logs:
                self._last[name] = _float(logs[key])
        self.hb.beat(step=getattr(state, "global_step", None), **self._last)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.hb.current_phase != "eval":
            self.hb.phase_now("eval")
        self.hb.beat()  # throttled: keeps a long evaluation visibly alive

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Evaluation has finished; a save may follow in the same step.
        self.hb.phase_now("checkpoint" if getattr(control, "should_save", False) else "train")
        self.pace.pause()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Called after the checkpoint is written; the save itself runs between on_step_end and here.
        self.hb.phase_now("train")
        self.pace.pause()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.hb.done()


#: The name the earlier single-file helper used.
WatchdogHeartbeatCallback = WatchdogCallback

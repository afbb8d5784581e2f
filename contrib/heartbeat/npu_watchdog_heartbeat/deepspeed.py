"""DeepSpeed: hooks on the engine's `backward` (the loss) and `step` (everything else).

    from npu_watchdog_heartbeat.deepspeed import watch
    engine, optimizer, _, _ = deepspeed.initialize(...)
    watch(engine)                                  # path from NPU_WATCHDOG_HEARTBEAT

DeepSpeed has no callback API, so `watch` wraps the two engine methods every DeepSpeed loop
calls. After each optimizer step (gradient-accumulation boundary) it reports `global_steps`, the
loss of the last micro-batch, the learning rate, the global grad norm, the fp16 loss scale and
whether the step was skipped for an overflow (`skipped`; the daemon's loss-scale rule sees the
scale fall), and samples/s over the wall time between steps (`train_batch_size()` per step; or
tokens/s with `tokens_per_step`). Wrap evaluation and `save_checkpoint` in `hb.phase(...)`, or
call `watch(engine, phases=True)` to have `save_checkpoint` and `eval()`/`train()` do it.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Optional

from npu_watchdog_heartbeat._values import scalar
from npu_watchdog_heartbeat.pace import Pace
from npu_watchdog_heartbeat.writer import Heartbeat


def _call(obj: Any, name: str) -> Any:
    fn = getattr(obj, name, None)
    try:
        return fn() if callable(fn) else None
    except Exception:
        return None


def _loss_scale(engine: Any) -> Optional[float]:
    opt = getattr(engine, "optimizer", None)
    for attr in ("cur_scale", "loss_scale"):
        value = getattr(opt, attr, None)
        if isinstance(value, (int, float)):
            return float(value)
    return None


class DeepSpeedWatch:
    """The state kept between the wrapped calls of one engine."""

    def __init__(self, engine: Any, hb: Heartbeat, tokens_per_step: Optional[int]):
        self.engine, self.hb, self.tokens_per_step = engine, hb, tokens_per_step
        self.pace = Pace()
        self.pace.start()
        self.loss: Any = None
        self._skipped = getattr(engine, "skipped_steps", 0) or 0
        self._step = getattr(engine, "global_steps", None)

    def after_step(self) -> None:
        e = self.engine
        step = getattr(e, "global_steps", None)
        if step == self._step:  # a micro-batch inside gradient accumulation: no optimizer step
            return
        self._step = step
        skipped_now = getattr(e, "skipped_steps", 0) or 0
        skipped, self._skipped = skipped_now != self._skipped, skipped_now
        fields: Dict[str, Any] = {"loss": self.loss, "grad_norm": _call(e, "get_global_grad_norm"),
                                  "loss_scale": _loss_scale(e), "skipped": skipped}
        lrs = _call(e, "get_lr")
        if isinstance(lrs, (list, tuple)) and lrs:
            fields["lr"] = lrs[0]
        unit = "tokens_per_s" if self.tokens_per_step else "samples_per_s"
        rate = self.pace.step_end(self.tokens_per_step or _call(e, "train_batch_size"))
        if rate is not None:
            fields[unit] = rate
        self.hb.beat(step=step, **{k: v for k, v in fields.items() if v is not None})


def _wrap(engine: Any, name: str, before: Any = None, after: Any = None) -> None:
    original = getattr(engine, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        finally:
            if after is not None:
                after()
    setattr(engine, name, wrapper)


def watch(engine: Any, path: Optional[str] = None, min_interval: float = 10.0,
          tokens_per_step: Optional[int] = None, phases: bool = True,
          heartbeat: Optional[Heartbeat] = None) -> Heartbeat:
    """Attach the heartbeat to a DeepSpeed engine; returns it (for `hb.phase(...)` and `hb.done()`)."""
    hb = heartbeat or Heartbeat(path, min_interval=min_interval, phase="init")
    w = DeepSpeedWatch(engine, hb, tokens_per_step)
    hb.phase_now("train")

    def keep_loss(loss: Any, *args: Any, **kwargs: Any) -> None:
        w.loss = scalar(loss)

    _wrap(engine, "backward", before=keep_loss)
    _wrap(engine, "step", after=w.after_step)
    if phases:
        _wrap(engine, "save_checkpoint", before=lambda *a, **k: hb.phase_now("checkpoint"),
              after=lambda: (hb.phase_now("train"), w.pace.pause()))
        _wrap(engine, "eval", before=lambda *a, **k: hb.phase_now("eval"))
        _wrap(engine, "train", before=lambda *a, **k: _back_to_train(hb, w, *a, **k))
    engine.npu_watchdog_heartbeat = hb
    return hb


def _back_to_train(hb: Heartbeat, w: DeepSpeedWatch, mode: bool = True, *args: Any, **kwargs: Any) -> None:
    if mode is False:
        hb.phase_now("eval")
    elif hb.current_phase == "eval":
        hb.phase_now("train")
        w.pace.pause()

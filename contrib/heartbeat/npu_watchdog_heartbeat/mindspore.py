"""MindSpore: a `mindspore.train.Callback` writing the heartbeat of each rank.

    from npu_watchdog_heartbeat.mindspore import WatchdogCallback
    hb_cb = WatchdogCallback()                                    # path from NPU_WATCHDOG_HEARTBEAT
    model.train(epochs, ds, callbacks=[hb_cb, hb_cb.checkpoint(ModelCheckpoint(...))])

`on_train_step_end` reports `cur_step_num`, the loss from `net_outputs` (with a loss-scale cell
they are `(loss, overflow, scale)`: the overflow becomes `skipped` and the scale `loss_scale`;
otherwise the scale comes from the loss-scale manager, `get_loss_scale()`; MindFormers' training
cells return `(loss, overflow, scale, learning rate, global grad norm[, local norms, sizes])`,
and the learning rate and grad norm are taken from there: on Ascend a diverged run can show loss
0.0 while its gradients are NaN, which only the grad norm shows; a plain MindSpore cell returns
no grad norm, so none is reported), the learning rate when the optimizer exposes it, and samples/s over the wall time between step ends (`batch_num` of the
dataset is not needed: the batch size comes from `batch_size` or `cb_params.batch_size`).
Evaluation inside `model.train(..., valid_dataset=...)` is the `eval` phase; a checkpoint
callback wrapped with `hb_cb.checkpoint(...)` runs inside the `checkpoint` phase whenever one of
its hooks takes longer than half a second (i.e. when it saves; the phase is not declared for the
steps where it returns at once).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

from npu_watchdog_heartbeat.pace import Pace
from npu_watchdog_heartbeat.writer import Heartbeat

try:  # pragma: no cover - depends on the trainer's environment
    from mindspore.train import Callback as _Base
except Exception:  # MindSpore missing: duck-typed hooks with the same names
    _Base = object


def _number(value: Any) -> Any:
    asnumpy = getattr(value, "asnumpy", None)
    if callable(asnumpy):
        try:
            value = asnumpy()
        except Exception:
            return None
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            return None
    return value


def _param(cb_params: Any, name: str) -> Any:
    """`cb_params.<name>` or None. Why not getattr's default: MindSpore's real callback params
    (`_InternalCallbackParam`, a dict) raise KeyError, not AttributeError, for a missing name."""
    try:
        return getattr(cb_params, name, None)
    except Exception:
        return None


def step_fields(cb_params: Any) -> Dict[str, Any]:
    """Loss, overflow and loss scale from `cb_params` (plain or loss-scale training cell)."""
    out = _param(cb_params, "net_outputs")
    fields: Dict[str, Any] = {}
    if isinstance(out, (tuple, list)):
        if len(out) >= 1:
            fields["loss"] = _number(out[0])
        if len(out) >= 3:
            fields["skipped"] = bool(_number(out[1]))
            fields["loss_scale"] = _number(out[2])
        if len(out) >= 5:  # MindFormers' training cells: (..., learning rate, global grad norm[, local norms])
            fields["lr"] = _number(out[3])
            # An overflow step is skipped by the loss-scale cell: its inf/NaN norm is not a divergence.
            if not fields.get("skipped"):
                fields["grad_norm"] = _number(out[4])
    elif out is not None:
        fields["loss"] = _number(out)
    mgr = _param(cb_params, "loss_scale_manager")
    if "loss_scale" not in fields and mgr is not None and callable(getattr(mgr, "get_loss_scale", None)):
        fields["loss_scale"] = _number(mgr.get_loss_scale())
    opt = _param(cb_params, "optimizer")
    lr = getattr(opt, "learning_rate", None)
    if "lr" not in fields and lr is not None and not callable(lr):
        fields["lr"] = _number(lr)
    return {k: v for k, v in fields.items() if isinstance(v, (int, float, bool))}


#: A wrapped checkpoint hook running this long is saving: the `checkpoint` phase is declared.
SAVE_AFTER = 0.5


class _PhaseWrapped(_Base):  # type: ignore[misc,valid-type]
    """Runs another callback's step/epoch hooks inside the `checkpoint` phase when it acts."""

    def __init__(self, inner: Any, hb: Heartbeat, pace: Pace):
        self.inner, self.hb, self.pace = inner, hb, pace

    def _around(self, name: str, run_context: Any) -> None:
        fn = getattr(self.inner, name, None)
        if fn is None:
            return
        started = time.monotonic()
        # Declared only when the hook runs long (a save): it is called every step and usually
        # returns at once.
        with self.hb.phase("checkpoint", after=SAVE_AFTER):
            fn(run_context)
        if time.monotonic() - started >= SAVE_AFTER:
            self.pace.pause()

    def on_train_step_end(self, run_context: Any) -> None:
        self._around("on_train_step_end", run_context)

    def on_train_epoch_end(self, run_context: Any) -> None:
        self._around("on_train_epoch_end", run_context)

    def on_train_end(self, run_context: Any) -> None:
        self._around("on_train_end", run_context)

    def on_train_begin(self, run_context: Any) -> None:
        fn = getattr(self.inner, "on_train_begin", None)
        if fn is not None:
            fn(run_context)


class WatchdogCallback(_Base):  # type: ignore[misc,valid-type]
    def __init__(self, path: Optional[str] = None, min_interval: float = 10.0, batch_size: Optional[int] = None,
                 tokens_per_step: Optional[int] = None, heartbeat: Optional[Heartbeat] = None):
        self.hb = heartbeat or Heartbeat(path, min_interval=min_interval, phase="init")
        self.batch_size, self.tokens_per_step = batch_size, tokens_per_step
        self.pace = Pace()

    def checkpoint(self, callback: Any) -> Any:
        """Wrap a checkpoint callback (e.g. ModelCheckpoint) so its saves are the `checkpoint` phase."""
        return _PhaseWrapped(callback, self.hb, self.pace)

    def on_train_begin(self, run_context: Any) -> None:
        self.hb.phase_now("train")
        self.pace.start()

    def on_train_step_end(self, run_context: Any) -> None:
        cb = run_context.original_args()
        fields = step_fields(cb)
        unit = "tokens_per_s" if self.tokens_per_step else "samples_per_s"
        rate = self.pace.step_end(self.tokens_per_step or self.batch_size or _param(cb, "batch_size"))
        if rate is not None:
            fields[unit] = rate
        self.hb.beat(step=_param(cb, "cur_step_num"), **fields)

    def on_eval_begin(self, run_context: Any) -> None:
        self.hb.phase_now("eval")

    def on_eval_step_end(self, run_context: Any) -> None:
        self.hb.beat()

    def on_eval_end(self, run_context: Any) -> None:
        self.hb.phase_now("train")
        self.pace.pause()

    def on_train_end(self, run_context: Any) -> None:
        self.hb.done()

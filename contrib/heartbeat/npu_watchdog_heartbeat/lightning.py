"""PyTorch Lightning: a `Callback` writing the heartbeat of each rank.

    from npu_watchdog_heartbeat.lightning import WatchdogCallback
    trainer = L.Trainer(..., callbacks=[WatchdogCallback()])   # path from NPU_WATCHDOG_HEARTBEAT

Reports the global step, the training loss (`outputs["loss"]`), the global L2 norm of the
gradients (taken in `on_before_optimizer_step`, where Lightning has already unscaled AMP
gradients; a non-finite norm on a step the grad scaler then skipped is reported with
`skipped`), the first optimizer's learning rate, the AMP loss scale when a grad scaler is in
use, samples/s (or tokens/s with `tokens_per_step`) over the wall time between batch ends, and
the phases `eval` (validation) and `checkpoint` (from `on_save_checkpoint` until the next
training batch). The grad norm matters on Ascend: a diverged run can log loss 0.0 while its
gradients are NaN, and only the norm shows it.
"""

from __future__ import annotations

from typing import Any, Optional

from npu_watchdog_heartbeat._values import leading_dim, scalar
from npu_watchdog_heartbeat.pace import Pace
from npu_watchdog_heartbeat.writer import Heartbeat

try:  # pragma: no cover - depends on the trainer's environment
    from lightning.pytorch import Callback as _Base
except Exception:
    try:
        from pytorch_lightning import Callback as _Base
    except Exception:  # neither installed: duck-typed hooks
        _Base = object


def _loss_scale(trainer: Any) -> Optional[float]:
    scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
    get = getattr(scaler, "get_scale", None)
    try:
        return float(get()) if callable(get) else None
    except Exception:
        return None


def grad_norm(module: Any) -> Any:
    """The global L2 norm of `module`'s gradients as a 0-d tensor (no host sync here: it is read
    once per batch end, with the loss), or None when no parameter has a gradient."""
    grads = [p.grad for p in module.parameters() if getattr(p, "grad", None) is not None]
    if not grads:
        return None
    import torch  # Lightning runs on torch; the package itself imports no framework

    norms = torch.stack([torch.linalg.vector_norm(g.detach().float()) for g in grads])
    return torch.linalg.vector_norm(norms)


def _lr(trainer: Any) -> Optional[float]:
    try:
        return float(trainer.optimizers[0].param_groups[0]["lr"])
    except Exception:
        return None


class WatchdogCallback(_Base):  # type: ignore[misc,valid-type]
    def __init__(self, path: Optional[str] = None, min_interval: float = 10.0,
                 tokens_per_step: Optional[int] = None, heartbeat: Optional[Heartbeat] = None):
        self.hb = heartbeat or Heartbeat(path, min_interval=min_interval, phase="init")
        self.tokens_per_step = tokens_per_step
        self.pace = Pace()
        self._grad_norm: Any = None
        self._scale: Optional[float] = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.hb.phase_now("train")
        self.pace.start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.hb.current_phase in ("eval", "checkpoint"):
            self.hb.phase_now("train")
            self.pace.pause()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        try:
            self._grad_norm = grad_norm(pl_module)
        except Exception:  # never into the training loop
            self._grad_norm = None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        unit = "tokens_per_s" if self.tokens_per_step else "samples_per_s"
        rate = self.pace.step_end(self.tokens_per_step or leading_dim(batch))
        scale = _loss_scale(trainer)
        fields = {"loss": scalar(outputs), "lr": _lr(trainer), "loss_scale": scale,
                  "grad_norm": self._grad_norm}
        self._grad_norm = None  # a batch that accumulates gradients reports none
        if scale is not None and self._scale is not None:
            # The scaler backs off after an overflow, whose step it skipped: that step's inf/NaN
            # norm is AMP at work, not a divergence (a collapsing scale is judged by its trend).
            fields["skipped"] = scale < self._scale
            if fields["skipped"]:
                fields["grad_norm"] = None
        self._scale = scale
        if rate is not None:
            fields[unit] = rate
        self.hb.beat(step=getattr(trainer, "global_step", None),
                     **{k: v for k, v in fields.items() if v is not None})

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not getattr(trainer, "sanity_checking", False):
            self.hb.phase_now("eval")

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        self.hb.beat()  # throttled: keeps a long validation visibly alive

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.hb.current_phase == "eval":
            self.hb.phase_now("train")
            self.pace.pause()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        # Lightning writes the file right after building the dict; the next batch ends the phase.
        self.hb.phase_now("checkpoint")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.hb.done()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.hb.flush()  # the last values reach the file; the watchdog sees the rank go quiet

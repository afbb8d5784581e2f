"""Megatron-LM / MindSpeed: a patch on `training_log` (and around checkpoint saves and evaluation).

    from npu_watchdog_heartbeat.megatron import patch
    patch()          # before pretrain(...); path from NPU_WATCHDOG_HEARTBEAT

Megatron calls `training_log(loss_dict, total_loss_dict, learning_rate, ..., iteration,
loss_scale, report_memory_flag, skipped_iter, grad_norm, params_norm, num_zeros_in_grad)` on every
rank after every iteration (only the last pipeline stage has the losses). The patch binds those
arguments by name, so positional or keyword calls and the parameters added or dropped across
releases all work, and reports: `iteration` as the step, the `lm loss` of this iteration, the
learning rate, the grad norm, the loss scale, `skipped` for a skipped iteration, and Megatron's
running counts of skipped and NaN iterations (`skipped_iterations`, `nan_iterations`, kept as
extra fields). Samples/s are the global batch size over the wall time between iterations.
`save_checkpoint` runs in the `checkpoint` phase, `evaluate_and_print_results` in `eval`, and
`train` returning normally writes `done`.
The module to patch defaults to `megatron.training.training` (where current Megatron-LM trees and
MindSpeed keep the loop); pass another (e.g. `megatron.training` of older trees) as `module=`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Dict, Optional

from npu_watchdog_heartbeat._values import scalar
from npu_watchdog_heartbeat.pace import Pace
from npu_watchdog_heartbeat.writer import Heartbeat

DEFAULT_MODULE = "megatron.training.training"


def _number(value: Any) -> Any:
    value = scalar(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            return None
    return value if isinstance(value, (int, float)) else None


def log_fields(args: Dict[str, Any]) -> Dict[str, Any]:
    """Heartbeat fields from `training_log`'s bound arguments (missing ones are left out)."""
    loss_dict = args.get("loss_dict") or {}
    total = args.get("total_loss_dict") or {}
    fields: Dict[str, Any] = {
        "loss": _number(loss_dict.get("lm loss")) if isinstance(loss_dict, dict) else None,
        "lr": _number(args.get("learning_rate")),
        "grad_norm": _number(args.get("grad_norm")),
        "loss_scale": _number(args.get("loss_scale")),
        "skipped": bool(_number(args.get("skipped_iter")) or 0),
        "skipped_iterations": _number(total.get("skipped iterations")) if isinstance(total, dict) else None,
        "nan_iterations": _number(total.get("nan iterations")) if isinstance(total, dict) else None,
    }
    return {k: v for k, v in fields.items() if v is not None}


def _global_batch() -> Optional[int]:
    try:
        get_args = importlib.import_module("megatron.training").get_args
        return int(get_args().global_batch_size)
    except Exception:
        return None


def _phase_wrapper(original: Any, hb: Heartbeat, phase: str, pace: Pace) -> Any:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with hb.phase(phase):
            result = original(*args, **kwargs)
        pace.pause()
        return result
    return wrapper


def patch(module: Any = DEFAULT_MODULE, path: Optional[str] = None, min_interval: float = 10.0,
          batch_size: Optional[int] = None, tokens_per_step: Optional[int] = None,
          heartbeat: Optional[Heartbeat] = None) -> Heartbeat:
    """Patch `training_log`, `save_checkpoint`, `evaluate_and_print_results` in `module`; returns the heartbeat."""
    mod = importlib.import_module(module) if isinstance(module, str) else module
    hb = heartbeat or Heartbeat(path, min_interval=min_interval, phase="init")
    pace = Pace()
    pace.start()
    original = mod.training_log
    signature = inspect.signature(original)

    @functools.wraps(original)
    def training_log(*args: Any, **kwargs: Any) -> Any:
        # Megatron updates its skipped / NaN iteration counts inside: read them after it ran.
        result = original(*args, **kwargs)
        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
            if hb.current_phase == "init":
                hb.phase_now("train")
            unit = "tokens_per_s" if tokens_per_step else "samples_per_s"
            rate = pace.step_end(tokens_per_step or batch_size or _global_batch())
            fields = log_fields(bound)
            if rate is not None:
                fields[unit] = rate
            hb.beat(step=bound.get("iteration"), **fields)
        except Exception as exc:  # a changed signature must never break training
            hb.errors += 1
            hb.last_error = f"training_log hook: {type(exc).__name__}: {exc}"
        return result

    mod.training_log = training_log
    for name, phase in (("save_checkpoint", "checkpoint"), ("evaluate_and_print_results", "eval")):
        fn = getattr(mod, name, None)
        if callable(fn):
            setattr(mod, name, _phase_wrapper(fn, hb, phase, pace))
    if callable(getattr(mod, "train", None)):
        mod.train = _done_wrapper(mod.train, hb)
    return hb


def _done_wrapper(original: Any, hb: Heartbeat) -> Any:
    """`train()` returning normally is the end of the run (an exception or a kill is not)."""
    @functools.wraps(original)
    def train(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        hb.done()
        return result
    return train

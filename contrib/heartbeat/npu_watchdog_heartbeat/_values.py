"""Small value helpers shared by the framework integrations (no framework imports here)."""

from __future__ import annotations

from typing import Any, Optional


def leading_dim(batch: Any) -> Optional[int]:
    """Samples in a batch: the first dimension of the first tensor-like thing found in it."""
    for _ in range(4):  # tensor, or a (nested) tuple/list/dict holding one
        shape = getattr(batch, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
        if isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        elif isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        else:
            return None
    return None


def scalar(value: Any) -> Any:
    """A loss that may be a tensor, a dict holding 'loss', or a (loss, ...) tuple."""
    if isinstance(value, dict):
        value = value.get("loss")
    elif isinstance(value, (list, tuple)) and value:
        value = value[0]
    if value is None:
        return None
    detach = getattr(value, "detach", None)
    if callable(detach):
        value = detach()
    return value

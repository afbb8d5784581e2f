"""Parsing of heartbeat file contents, apart from any I/O so it is tested on plain bytes.

A trainer writes one heartbeat file per rank, either as a single JSON object (rewritten each
time) or as JSON lines (appended; the last complete line counts). Files are read while the trainer
may be writing them, so a half-written tail is expected: it is skipped when an earlier complete
line exists, and otherwise reported as a `HeartbeatFormatError` that the probe retries next round.

Every known field is optional; unknown fields are kept (`extra`) and ignored by the detectors.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

#: Phases the detectors know; any other string is kept and gets the default stale threshold.
PHASES = ("init", "train", "eval", "checkpoint", "done")

_KNOWN = ("step", "time", "loss", "grad_norm", "loss_scale", "tokens_per_s", "samples_per_s", "phase", "rank", "pid")

#: A `time` above this is surely milliseconds or nanoseconds, not epoch seconds (year ~5138).
_MAX_EPOCH_SECONDS = 1e11


#: An integer written as a string: ASCII digits only (`int()` also takes other scripts' digits).
_ASCII_INT = re.compile(r"-?[0-9]{1,18}", re.ASCII)


class HeartbeatFormatError(ValueError):
    """The content cannot be read as a heartbeat (yet): the message says exactly why."""


@dataclass(frozen=True)
class ParsedBeat:
    step: Optional[int] = None
    time: Optional[float] = None
    loss: Optional[float] = None
    grad_norm: Optional[float] = None
    loss_scale: Optional[float] = None
    throughput: Optional[float] = None
    #: "tokens_per_s" or "samples_per_s": whichever field gave `throughput`.
    throughput_unit: Optional[str] = None
    phase: Optional[str] = None
    rank: Optional[int] = None
    pid: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)


def _float(name: str, value: Any) -> Optional[float]:
    # NaN/inf must survive: they are what the loss_nan rule looks for. JSON has no NaN token,
    # but Python's json writes/reads `NaN`/`Infinity`, and some loggers write "nan" strings.
    if value is None:
        return None
    if isinstance(value, bool):
        raise HeartbeatFormatError(f"field {name!r}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.isascii():  # float() also takes other scripts' digits
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise HeartbeatFormatError(f"field {name!r}: expected a number, got {value!r:.60}")


def _int(name: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool):
        raise HeartbeatFormatError(f"field {name!r}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, str) and _ASCII_INT.fullmatch(value.strip()):
        return int(value.strip())
    raise HeartbeatFormatError(f"field {name!r}: expected an integer, got {value!r:.60}")


def beat_from_object(obj: Dict[str, Any]) -> ParsedBeat:
    """Validate one decoded JSON object; wrong types are errors naming the field."""
    ts = _float("time", obj.get("time"))
    if ts is not None and (not math.isfinite(ts) or ts < 0 or ts > _MAX_EPOCH_SECONDS):
        raise HeartbeatFormatError(f"field 'time': expected epoch seconds, got {obj.get('time')!r:.60}")
    phase = obj.get("phase")
    if phase is not None:
        if not isinstance(phase, str) or not phase.strip():
            raise HeartbeatFormatError(f"field 'phase': expected one of {', '.join(PHASES)}, got {phase!r:.60}")
        phase = phase.strip().lower()
    throughput, unit = None, None
    for key in ("tokens_per_s", "samples_per_s"):
        v = _float(key, obj.get(key))
        if v is not None:
            throughput, unit = v, key
            break
    return ParsedBeat(
        step=_int("step", obj.get("step")),
        time=ts,
        loss=_float("loss", obj.get("loss")),
        grad_norm=_float("grad_norm", obj.get("grad_norm")),
        loss_scale=_float("loss_scale", obj.get("loss_scale")),
        throughput=throughput,
        throughput_unit=unit,
        phase=phase,
        rank=_int("rank", obj.get("rank")),
        pid=_int("pid", obj.get("pid")),
        extra={k: v for k, v in obj.items() if k not in _KNOWN},
    )


def _loads_object(text: str) -> Dict[str, Any]:
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise HeartbeatFormatError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def parse_heartbeat(data: bytes) -> ParsedBeat:
    """Parse a heartbeat file's bytes: one JSON object, or JSON lines (last complete line wins).

    Raises HeartbeatFormatError for empty, truncated, half-written or ill-typed content, and for
    content that breaks the JSON decoder itself (a 5000-digit number, 100,000 nested brackets, an
    integer too large for a float): one bad file is that file's error, never the probe's.
    """
    try:
        return _parse(data)
    except HeartbeatFormatError:
        raise
    except (ValueError, RecursionError, OverflowError) as exc:
        raise HeartbeatFormatError(f"unreadable JSON ({type(exc).__name__}: {str(exc)[:80]})") from None


def _parse(data: bytes) -> ParsedBeat:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeartbeatFormatError(f"not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise HeartbeatFormatError("empty file (being rewritten?)")
    try:
        return beat_from_object(_loads_object(text))
    except json.JSONDecodeError as exc:
        whole_error = exc
    # JSON lines: walk back from the end to the newest line that is a complete object. The tail
    # without a final newline may be a line still being appended: skip it if it does not parse.
    lines = text.split("\n")
    for line in reversed(lines):
        if not line.strip():
            continue
        try:
            obj = _loads_object(line)
        except json.JSONDecodeError:
            continue
        return beat_from_object(obj)
    raise HeartbeatFormatError(
        f"half-written or invalid JSON: {whole_error.msg} at line {whole_error.lineno} column {whole_error.colno}"
    )

"""Value types shared by every config section: durations, sizes, secrets, strict models.

Durations and sizes are strings with units on purpose: `interval: 10` is ambiguous (seconds?
rounds?), `interval: 10s` is not. Every field type here raises a ValueError whose text reads well
after the key path, because the loader prints `key.path: <message>, got '<value>'`.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
import stat
from typing import Any, Dict

from watchdog.compat import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, SecretStr, model_validator


from watchdog.parse.durations import parse_duration

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$")
_SIZE_UNITS = {
    "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}


#: Largest size accepted (a signed 64-bit byte count).
MAX_SIZE_BYTES = 2 ** 63 - 1
#: Longest file read for `<secret>_file` (a webhook URL or token is far shorter).
MAX_SECRET_FILE_BYTES = 64 * 1024
#: Longer duration or size strings are refused before any regex or float conversion runs.
_MAX_VALUE_CHARS = 64


def read_bounded(path: str, limit: int) -> bytes:
    """Read a regular file of at most `limit` bytes, never blocking.

    `url_file: /dev/zero` or a FIFO would hang a plain read forever: the file is opened
    non-blocking and must be a regular file; a larger one is refused, not cut.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        chunks = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise OSError(f"{path} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def format_duration(seconds: float) -> str:
    """Render seconds back as the shortest duration string (used in messages and dumps)."""
    if seconds < 1 and seconds != int(seconds):
        return f"{int(round(seconds * 1000))}ms"
    seconds = int(round(seconds))
    if seconds == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(out)


def parse_size(value: Any) -> int:
    """Parse `512MiB`, `2GiB`, `100MB`, `4096B` into bytes."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError("expected a size like 512MiB or 2GiB")
    m = _SIZE_RE.match(value.strip()) if len(value) <= _MAX_VALUE_CHARS else None
    if not m:
        raise ValueError("expected a size like 512MiB or 2GiB")
    size = float(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if not math.isfinite(size) or size > MAX_SIZE_BYTES:
        raise ValueError("size larger than 8 EiB")
    return int(size)


#: Seconds, written in config as `30s`, `5m`, `1h30m`.
Duration = Annotated[float, BeforeValidator(parse_duration)]
#: Bytes, written in config as `512MiB`, `2GiB`.
Size = Annotated[int, BeforeValidator(parse_size)]
#: A secret: redacted in every dump; may be given as `<name>_file: /path` instead of inline.
Secret = SecretStr


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors, and `<secret>_file` keys are read.

    A field typed `Secret` called `url` may instead be written `url_file: /etc/npu-watchdog/url`;
    the file's content (trailing newline stripped) becomes the value. Reading happens here so the
    error names the key path like every other config error.
    """

    # allow_inf_nan=False: `.inf` or `.nan` in a float field is an error, never a timer that breaks.
    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _read_secret_files(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        secret_fields = [
            name for name, f in cls.model_fields.items()
            if f.annotation in (SecretStr, "SecretStr") or "SecretStr" in str(f.annotation)
        ]
        if not secret_fields:
            return data
        data = dict(data)
        for name in secret_fields:
            key = f"{name}_file"
            if key not in data:
                continue
            path = data.pop(key)
            if name in data:
                raise ValueError(f"give either {name} or {key}, not both")
            if not isinstance(path, str):
                raise ValueError(f"{key}: expected a file path")
            try:
                data[name] = read_bounded(path, MAX_SECRET_FILE_BYTES).decode("utf-8").rstrip()
            except OSError as exc:
                raise ValueError(f"{key}: cannot read {path!r} ({exc.strerror or exc})") from None
            except UnicodeDecodeError:
                raise ValueError(f"{key}: {path!r} is not UTF-8 text") from None
        return data


def secret_value(secret: Any) -> str:
    """The plain text of a Secret (or '' for None); only channels should ever call this."""
    if secret is None:
        return ""
    if isinstance(secret, SecretStr):
        return secret.get_secret_value()
    return str(secret)


Labels = Dict[str, str]


# the system tz database (or the `tzdata` package when installed); 3.8 through its backport
from watchdog.compat import ZoneInfo, ZoneInfoNotFoundError


def load_zone(name: str) -> _dt.tzinfo:
    """The tzinfo for an IANA name; `UTC` always works, even without a tz database. Here, with the
    config's value types: `alerting.display_timezone` is checked with it, and the message clock
    (watchdog.alerting.clock) turns the name into its zone with it."""
    if name in ("UTC", "Etc/UTC", "Z"):
        return _dt.timezone.utc
    if ZoneInfo is None:
        raise ValueError(f"time zone {name!r}: no tz database support in this Python")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown time zone {name!r} (expected an IANA name such as Asia/Shanghai or UTC; "
                         f"{type(exc).__name__})") from None

"""Numbers read from text other users control (their processes' environments, their files).

Python's `str.isdigit()` accepts characters that `int()` refuses (`²`), and `int()`/`float()`
accept digits of every script (`١٢٠` is 120): a check with one and a parse with the other lets
any user on the node raise an exception in the root daemon, or slip a value past a check. Every
number taken from such text goes through here: ASCII digits only, a bounded length, a range, and
None (never an exception) for anything else.
"""

from __future__ import annotations

import re
from typing import Optional

_INT = re.compile(r"[0-9]{1,18}", re.ASCII)
_NUMBER = re.compile(r"[0-9]{1,18}(\.[0-9]{1,18})?", re.ASCII)


def ascii_int(text: str, lo: int = 0, hi: int = (1 << 31) - 1) -> Optional[int]:
    """A non-negative integer of ASCII digits (surrounding blanks allowed) within [lo, hi], else None."""
    value = text.strip(" \t") if isinstance(text, str) else ""
    if not _INT.fullmatch(value):
        return None
    n = int(value)
    return n if lo <= n <= hi else None


def ascii_number(text: str, lo: float = 0.0, hi: float = 1e12) -> Optional[float]:
    """A non-negative decimal number of ASCII digits (`120`, `1.5`) within [lo, hi], else None
    (no exponent, sign, `inf` or `nan`)."""
    value = text.strip(" \t") if isinstance(text, str) else ""
    if not _NUMBER.fullmatch(value):
        return None
    n = float(value)
    return n if lo <= n <= hi else None

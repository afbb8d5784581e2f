"""Reading the tail of a file cheaply, whatever its size (a multi-GB training log is common)."""

from __future__ import annotations

import glob
import os
from typing import List, Optional, Tuple

from watchdog.host.rankfiles import rank_file


def tail_file(path: str, max_bytes: int, max_lines: int, uid: Optional[int] = None) -> Tuple[bytes, int, bool]:
    """The last `max_lines` lines within the last `max_bytes` bytes: (data, file size, truncated).

    Seeks instead of reading the whole file. When the cut falls inside a line, that partial first
    line is dropped so the tail starts on a line boundary. Opened through `rankfiles`: a link, a
    FIFO or another user's file than `uid`'s raises RankFileRefused (never blocks, never read).
    """
    with rank_file(path, uid) as fh:
        size = os.fstat(fh.fileno()).st_size
        start = max(0, size - max_bytes)
        fh.seek(start)
        data = fh.read(max_bytes)
    truncated = start > 0
    if truncated:
        nl = data.find(b"\n")
        data = data[nl + 1:] if nl >= 0 else data
    lines = data.splitlines(keepends=True)
    if len(lines) > max_lines:
        lines = lines[-max_lines:]
        truncated = True
    return b"".join(lines), size, truncated


def expand(pattern: str) -> List[str]:
    """A path or glob -> the matching paths (a plain path is returned even if it does not exist)."""
    return sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]


def member_name(prefix: str, path: str) -> str:
    """Archive member name mirroring an absolute path under `prefix/`."""
    return f"{prefix}/{os.path.abspath(path).lstrip('/')}"

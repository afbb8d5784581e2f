"""Bytes of log -> bytes the rules can match: terminal colour codes and NUL bytes removed.

Trainers print through colouring loggers (rich, loguru, colorlog), so `loss: nan` may arrive as
`\\x1b[1;31mloss\\x1b[0m: nan`; a torn write or a sparse region after a crash leaves NUL bytes,
even inside a keyword (`lo\\x00ss`). Either hides a failure line from every rule. `normalize`
removes ANSI CSI sequences (ESC `[`, parameter bytes, intermediate bytes, one final byte) and
NULs, and nothing else: a line's bytes never cross a newline (none of those classes contains
one), so line counts and offsets stay as they were.

Linear time on hostile input: a block without ESC or NUL is returned as is after two `in`
scans (memchr speed); the CSI pattern is a literal start and bounded repetitions of disjoint
byte classes, so each attempt at an ESC costs at most ~70 steps whatever follows.
Kept apart from the matcher so a faster scan path can call it on candidate lines only.
"""

from __future__ import annotations

import re

#: ESC [ , up to 64 parameter bytes (0x30-0x3F), up to 8 intermediate bytes (0x20-0x2F), one
#: final byte (0x40-0x7E). Real colour codes are under 20 bytes (`ESC[38;2;255;255;255m`).
_CSI = re.compile(rb"\x1b\[[0-?]{0,64}[ -/]{0,8}[@-~]")


def normalize(block: bytes) -> bytes:
    """`block` without ANSI CSI sequences and NUL bytes (the same object when it has none)."""
    if b"\x1b" in block:
        block = _CSI.sub(b"", block)
    if b"\x00" in block:
        block = block.replace(b"\x00", b"")
    return block

"""Plain text made safe to show: control characters and terminal sequences dropped, cut to a
length without splitting a character, folded onto one line. Below both the message composer
(`render`) and the grouped digest (`digest`), which import it.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Terminal sequences a colouring logger or a shell writes, each dropped whole so its payload (an
# OSC 8 hyperlink's hidden URL, a window title) never shows as text: control strings (OSC, DCS,
# SOS, PM, APC; 7-bit or 8-bit introducer, ended by BEL or ST; an unended one loses only its
# introducer, so a hostile line cannot hide the rest of itself), CSI
# sequences (7-bit or 8-bit), then any other escape sequence. Each part starts at an ESC or C1
# byte and its repeated classes exclude those, so matching stays linear on hostile text.
_ANSI = re.compile(r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)"
                   r"|(?:\x1b\[|\x9b)[0-?]{0,64}[ -/]{0,8}[@-~]"
                   r"|\x1b[ -/]{0,8}[0-~]")

def clean(text: Any) -> str:
    """Drop ANSI colours and control characters (keeps tabs and newlines)."""
    s = "" if text is None else str(text)
    return _CONTROL.sub("", _ANSI.sub("", s))


#: Code points that belong to the character before them (or join it to the next): a cut between
#: them and their neighbour would split what the reader sees as one character.
_JOINERS = {"\u200c", "\u200d", "\u20e3"}


def _clings(ch: str) -> bool:
    """Whether `ch` belongs to the character before it: combining marks, variation selectors,
    emoji skin tones and tag characters."""
    o = ord(ch)
    return (unicodedata.category(ch) in ("Mn", "Mc", "Me") or 0xFE00 <= o <= 0xFE0F or 0x1F3FB <= o <= 0x1F3FF
            or 0xE0020 <= o <= 0xE007F or 0xE0100 <= o <= 0xE01EF or ch in _JOINERS)


def cut_index(text: str, n: int) -> int:
    """The largest index <= `n` at which `text` can be cut without splitting a character: never
    between a base and its combining marks, selectors or modifiers, nor after a joiner."""
    i = max(0, min(n, len(text)))
    while 0 < i < len(text) and (_clings(text[i]) or text[i - 1] in _JOINERS):
        i -= 1
    return i


def cut_chars(text: str, limit: int, mark: str = "…") -> str:
    """`text` in at most `limit` characters (code points), ending in `mark` when cut."""
    if len(text) <= limit:
        return text
    return text[:cut_index(text, limit - len(mark))] + mark


def cut_bytes(text: str, max_bytes: int, mark: str = "…") -> str:
    """`text` in at most `max_bytes` bytes of UTF-8 (a CJK character is 3 bytes, an emoji 4),
    ending in `mark` when cut; never splits a character."""
    if len(text.encode("utf-8")) <= max_bytes:
        return text
    budget = max_bytes - len(mark.encode("utf-8"))
    lo, hi = 0, len(text)
    while lo < hi:  # the most code points whose UTF-8 fits the budget
        mid = (lo + hi + 1) // 2
        if len(text[:mid].encode("utf-8")) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[:cut_index(text, lo)] + mark


def code_line(text: Any, limit: int) -> str:
    """A log line for a code block: control characters and terminal sequences dropped, line breaks
    removed, cut to `limit`; spaces, tabs and every printable character kept as they are."""
    return cut_chars(clean(text).replace("\r", "").replace("\n", " "), limit)


def one_line(text: Any, limit: int) -> str:
    s = " ".join(clean(text).split())
    return cut_chars(s, limit)

"""The last lines of every followed log file: a rank's last words when it dies.

When a rank vanishes without a kernel record or a failure line any rule knows, what it printed
last (an `Error:` line, the tail of a traceback) is usually the best answer to "why". The logs
probe hands every slice it reads to `LastLinesRing.feed`, which looks only at the slice's last
`keep` lines (searching back from its end), so the cost of a slice does not depend on its size
beyond those lines, nor on how much the file held before.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Deque, Dict, List, Optional, Tuple

#: Lines kept per file, characters kept per line, files remembered at most (the least recently
#: written dropped): about 6 MB at worst, a few hundred KB for a node of 8 ranks and their plogs.
KEEP_LINES = 48
MAX_LINE_CHARS = 512
MAX_FILES = 256
#: Error-looking lines kept per file besides the last lines: in a log several ranks (or a rank
#: and its launcher) share, the survivors' progress lines push a dead rank's last words (and the
#: launcher's report of its exit) out of the last KEEP_LINES within seconds.
KEEP_ERRORS = 16

#: A line that looks like an error (linear: alternatives of literals, anchored variants).
ERRORISH = re.compile(
    r"(?i)(?:\b(?:error|fatal|critical|exception|abort(?:ed)?|killed|segmentation fault|core dumped)\b"
    r"|^\s*Traceback \(most recent call last\)|^\s*\w*(?:Error|Exception)\b)", re.ASCII)


@dataclass(frozen=True)
class LastLines:
    """The newest complete lines of one file (oldest first) and who writes it."""

    path: str
    source: str
    job: Optional[str]
    rank: Optional[str]
    lines: Tuple[str, ...]
    #: Epoch seconds the newest of them was read.
    at: float
    #: The newest error-looking lines (ERRORISH), oldest first, however far back among the lines.
    errors: Tuple[str, ...] = ()


def tail_lines(data: bytes, stop: int, keep: int, max_chars: int = MAX_LINE_CHARS) -> Tuple[str, ...]:
    """The last `keep` non-empty lines of `data[:stop]` (oldest first), each cut to `max_chars`."""
    out: List[str] = []
    end = stop
    if end > 0 and data[end - 1:end] == b"\n":
        end -= 1
    while end > 0 and len(out) < keep:
        start = data.rfind(b"\n", 0, end) + 1
        raw = data[start:min(end, start + max_chars * 4)]
        text = raw.decode("utf-8", "replace").replace("\x00", "").rstrip("\r")
        if text.strip():
            out.append(text[:max_chars])
        end = start - 1
    out.reverse()
    return tuple(out)


class LastLinesRing:
    def __init__(self, keep: int = KEEP_LINES, max_files: int = MAX_FILES):
        self.keep = keep
        self.max_files = max_files
        self._rings: "OrderedDict[str, Deque[str]]" = OrderedDict()
        self._errors: Dict[str, Deque[str]] = {}
        self._frozen: Dict[str, LastLines] = {}

    def feed(self, path: str, source: str, job: Optional[str], rank: Optional[str],
             data: bytes, stop: int, now: float) -> None:
        """Take the complete lines of `data[:stop]`, just read from `path`."""
        lines = tail_lines(data, stop, self.keep)
        if not lines:
            return
        ring = self._rings.get(path)
        if ring is None:
            ring = self._rings[path] = deque(maxlen=self.keep)
            self._errors[path] = deque(maxlen=KEEP_ERRORS)
            while len(self._rings) > self.max_files:
                old, _ = self._rings.popitem(last=False)
                self._frozen.pop(old, None)
                self._errors.pop(old, None)
        else:
            self._rings.move_to_end(path)
        ring.extend(lines)
        errors = self._errors[path]
        errors.extend(x for x in lines if ERRORISH.search(x))
        self._frozen[path] = LastLines(path=path, source=source, job=job, rank=rank, lines=tuple(ring), at=now,
                                       errors=tuple(errors))

    def snapshot(self) -> Tuple[LastLines, ...]:
        """Every file's last lines; files not written since the last call cost nothing to copy."""
        return tuple(self._frozen.values())

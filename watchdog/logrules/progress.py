"""Progress lines: which training-log lines say "the job completed a step".

The stall rule counts a log line as progress only when it is an iteration/step report of a known
trainer (or matches a configured pattern) and no failure rule matches it: a NaN line, an error or
a traceback written while the job is hung is not progress (it would resolve a stall and re-page).
Patterns are anchored on plain tokens with bounded repeats, so Python `re` runs them in linear
time; the block is pre-filtered with `bytes.find` on lower-case literals before any regex runs.
"""

from __future__ import annotations

import re
from typing import Callable, List, Optional, Sequence, Tuple

from watchdog.parse.pace import PHASE_LITERALS, PaceMark, parse_phase, parse_progress

#: The shipped patterns, one per trainer family (case-insensitive, matched per line).
DEFAULT_PATTERNS: Tuple[str, ...] = (
    # Megatron-LM / MindSpeed: ` iteration      120/  100000 | consumed samples: ...`
    r"\biteration\s{0,20}\d{1,12}\s{0,4}/\s{0,20}\d{1,12}\s{0,4}\|",
    # HF Trainer log dict: {'loss': 1.23, 'grad_norm': ..., 'learning_rate': ..., 'epoch': 0.5}
    r"\{'loss': [0-9.e+-]{1,24}, .{0,200}'epoch': [0-9.]{1,12}\}",
    # DeepSpeed: `[Rank 0] step=120, skipped=0, lr=[...]` and `steps: 120 loss: 1.23`
    r"\bstep=\d{1,12}, skipped=\d{1,12}",
    r"\bsteps: \d{1,12} loss: [0-9.]{1,24}",
    # MindSpore: `epoch: 1 step: 120, loss is 1.23`
    r"\bepoch: \d{1,9},? step: \d{1,12}, loss is [0-9.]{1,24}",
)

#: How much of a block's end is examined (see `ProgressMatcher.found`).
TAIL_BYTES = 256 * 1024
#: Lower-case substrings one of which every shipped pattern's line contains (fast pre-filter).
_LITERALS = (b"iteration", b"'loss'", b"step=", b"steps:", b"step:")
#: Newest progress lines of one block whose pace is read (a round's lines share its time: the
#: pace summary needs the newest counter, and a printed step time from each of a few lines).
PACE_LINES = 32


class ProgressMatcher:
    """Finds whether a block of complete lines holds a progress line that is not a failure."""

    def __init__(self, patterns: Optional[Sequence[str]] = None):
        self.patterns = tuple(DEFAULT_PATTERNS if patterns is None else patterns)
        self.regex = re.compile("|".join(f"(?:{p})" for p in self.patterns), re.IGNORECASE | re.ASCII) \
            if self.patterns else None
        self.literals = _LITERALS if patterns is None else ()

    def found(self, block: bytes, is_failure: Callable[[str], bool]) -> bool:
        """True when some line of the block's tail is a progress line no failure rule matches.

        Only the last TAIL_BYTES are examined: the round's lines all carry the round's time, so
        the newest progress line is what counts, and a multi-megabyte catch-up slice costs no
        more than a small one."""
        if self.regex is None:
            return False
        if len(block) > TAIL_BYTES:
            block = block[-TAIL_BYTES:]
            block = block[block.find(b"\n") + 1:]
        if self.literals:
            low = block.lower()
            if not any(lit in low for lit in self.literals):
                return False
        text = block.decode("utf-8", "replace")
        for line in reversed(text.splitlines()):
            if self.regex.search(line) and not is_failure(line):
                return True
        return False

    def marks(self, block: bytes, is_failure: Callable[[str], bool]) -> Tuple[bool, List[PaceMark]]:
        """`found` and, oldest first, the pace of the block's newest progress lines (at most
        PACE_LINES) with the phase lines (checkpoint, evaluation) among them; one walk from the
        end, bounded like `found`."""
        if self.regex is None:
            return False, []
        if len(block) > TAIL_BYTES:
            block = block[-TAIL_BYTES:]
            block = block[block.find(b"\n") + 1:]
        low = block.lower()
        phases = any(lit in low for lit in PHASE_LITERALS)
        if self.literals and not phases and not any(lit in low for lit in self.literals):
            return False, []
        out: List[PaceMark] = []
        found = False
        progress = 0
        for line in reversed(block.decode("utf-8", "replace").splitlines()):
            if progress >= PACE_LINES:
                # Past the progress lines kept, only the newest phase line: an evaluation's line
                # comes at its end, and a round read late holds more steps after it than the walk.
                if not phases:
                    break
                phase = _phase_only(line)
                if phase is not None:
                    out.append(PaceMark(phase=phase))
                    break
                continue
            if self.regex.search(line) and not is_failure(line):
                found = True
                progress += 1
                mark = parse_progress(line)
                if mark is not None:
                    out.append(mark)
            elif phases:
                phase = parse_phase(line)
                if phase is not None:
                    out.append(PaceMark(phase=phase))
        out.reverse()
        return found, out


_PHASE_TEXT = tuple(lit.decode() for lit in PHASE_LITERALS)


def _phase_only(line: str) -> Optional[str]:
    """The phase a line opens, tested on the lines the progress walk no longer keeps (cheap
    literal test first: the rest of a 256 KB block may be walked)."""
    low = line.lower()
    return parse_phase(line) if any(lit in low for lit in _PHASE_TEXT) else None

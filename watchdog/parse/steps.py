"""The training step a line of text names: `iteration 5426/10000`, `step: 5426`, `global_step=77`.

Why a module of its own: the log detector's hint ("first seen at iteration 5426") and the alert
titles ("NaN loss at iteration 5426 on ranks 0-7") read the same numbers the same way. Pure, and
linear-time on untrusted text (a fixed alternation, bounded gaps, a bounded number of digits).
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

# Digits after `iteration`/`iter`/`step` as training loops print them: `iteration 5426/10000`,
# `step: 5426`, `step=5426`, `[step 5426]`, `global_step 5426`. Bounded gaps: linear time.
_STEP = re.compile(r"(?i)(?<![a-z])(?:global_step|iteration|iter|step)s?[ \t:=#\[(]{0,12}(\d{1,12})(?!\d)")
_ITER_WORD = re.compile(r"(?i)(?<![a-z])iter(?:ation)?")


def find_step(texts: Iterable[str]) -> Optional[tuple]:
    """(`iteration` or `step`, number) from the first text that names one, else None."""
    for text in texts:
        if not text:
            continue
        m = _STEP.search(str(text)[:2000])
        if m:
            word = "iteration" if _ITER_WORD.match(m.group(0)) else "step"
            return word, int(m.group(1))
    return None

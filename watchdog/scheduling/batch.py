"""Which probes' rounds one detector pass covers: rounds started together settle together.

Why: the probes of one interval start on the same grid point; a pass after each of their rounds
would judge the node five times in a few milliseconds, each time on a view where the others'
rounds were not in yet. The last round of a batch to settle runs one pass for all of them.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Optional, Set

from watchdog.scheduling.rounds import Round

#: Rounds started this close together form one batch: the last of them to finish runs the
#: detector pass for all (see `ProbeScheduler._finish`).
BATCH_SECONDS = 0.5


def gather(gathered: Set[str], name: str, own: bool, wait: bool, started: Dict[str, float],
           inflight: Dict[str, Round]) -> Optional[FrozenSet[str]]:
    """The probes to evaluate for now (emptying `gathered`), or None: none while another round of
    this round's batch (started within BATCH_SECONDS of it) is still under way, since the last of
    them evaluates for all. Another round counts only while it is under way: a hung one is not
    waited for (its batch mates' detectors then run in the next periodic pass, which runs whatever
    is not fresh). A quiet round (`own` False) adds nothing of its own, but when it is the last of
    its batch it still hands over the rounds that waited for it. With `wait` False this round does
    not wait for its batch mates: it takes what has gathered now (later ones gather on their own).
    Called under the scheduler's lock."""
    if own:
        gathered.add(name)
    elif not gathered:
        return None
    mine = started.get(name)
    if wait and mine is not None and any(
            other != name and not rnd.done.is_set() and abs(rnd.started - mine) < BATCH_SECONDS
            for other, rnd in inflight.items()):
        return None
    batch = frozenset(gathered)
    gathered.clear()
    return batch

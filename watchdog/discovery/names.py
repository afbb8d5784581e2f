"""A discovered job keeps the name it was first given while one of its rank processes lives, and
across a restart of the daemon.

A name made from the launcher's script while the launcher runs (`run-<time>`) would become the
ranks' script's (`train-<time>`) once a launch script that started them in the background has
left: the process probe would then see the job end (and call it finished) and a new one start, a
stall of the one running job would page under a name `status` no longer shows, and a daemon
restarted meanwhile would give the job its other name (its alerts, and the ranks it lost before
the restart, under the first one). So the names given are kept per rank process (pid and start
time) and saved in the state folder when they change (jobs appearing or going, not every scan).
They are forgotten when the settings that make names change (`job.name`, the name keys, the
scope): a reload of the same config keeps them.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import replace
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from watchdog.discovery.model import JobInfo
from watchdog.discovery.scan import label_safe
from watchdog.host.procstat import same_start
from watchdog.service import statefiles

log = logging.getLogger(__name__)

STATE_FILE = "discovery-names.json"
STATE_VERSION = 1
#: Rank processes remembered at most (a node runs a few jobs of a few hundred ranks at most).
MAX_RANKS = 65536


class GivenNames:
    def __init__(self, state_dir: Optional[str] = None, key: Hashable = None):
        self.path = os.path.join(state_dir, STATE_FILE) if state_dir else None
        self._lock = threading.Lock()
        #: rank pid -> (its start time, the name its job was given first)
        self._given: Dict[int, Tuple[float, str]] = {}
        self._key: Hashable = key
        self._episode = statefiles.SaveEpisode("the discovered jobs' names", self.path or "", log,
                                               "; a restart may name a running job anew")
        if self.path is not None:
            self._given = _load(statefiles.read_json(self.path, STATE_VERSION), key)

    def keep(self, jobs: Sequence[JobInfo], key: Hashable, unique: Any) -> List[JobInfo]:
        """`jobs` with the names first given to their rank processes; `unique` makes the names
        unique again (a kept name may meet a new job's). `key`: the naming settings."""
        with self._lock:
            if key != self._key:
                self._given, self._key = {}, key
            out = []
            for job in jobs:
                kept = next((self._given[r.pid][1] for r in job.ranks if r.pid in self._given
                             and r.started_at is not None
                             and same_start(self._given[r.pid][0], r.started_at)), None)
                out.append(job if kept is None or kept == job.name else replace(job, name=kept))
            out = list(unique(out))
            given = {r.pid: (float(r.started_at), j.name) for j in out for r in j.ranks if r.started_at is not None}
            if given != self._given:
                self._given = dict(list(given.items())[:MAX_RANKS])
                self._save()
            return out

    def _save(self) -> None:
        if self.path is None:
            return
        rows = [[pid, start, name] for pid, (start, name) in sorted(self._given.items())]
        try:
            statefiles.write_json(self.path, {"version": STATE_VERSION, "data": {"key": repr(self._key),
                                                                                  "ranks": rows}}, sync=False)
        except OSError as exc:
            self._episode.failed(exc)
            return
        self._episode.saved()


def _load(data: Any, key: Hashable) -> Dict[int, Tuple[float, str]]:
    """The saved names, when they were given under the same naming settings; {} otherwise, or for
    anything this module did not write."""
    if not isinstance(data, dict) or data.get("key") != repr(key):
        return {}
    out: Dict[int, Tuple[float, str]] = {}
    for row in (data.get("ranks") or [])[:MAX_RANKS]:
        if (isinstance(row, list) and len(row) == 3 and isinstance(row[0], int) and row[0] > 0
                and isinstance(row[1], (int, float)) and isinstance(row[2], str) and 0 < len(row[2]) <= 256):
            out[row[0]] = (float(row[1]), label_safe(row[2]))
    return out

"""Which change events concern a Tailer, and a round over just the files that changed.

Kept apart from `tail` (which owns rotation, truncation and offsets): this module only decides
*when* and *what* to read, from inotify events (see `inotify`).
"""

from __future__ import annotations

import fnmatch
import glob
import os
from typing import Iterable, Set

from watchdog.logrules.tail import Consumer, Tailer


def _dir_of(pattern: str) -> str:
    return os.path.dirname(os.path.expanduser(pattern)) or "."


def watch_dirs(tailer: Tailer) -> Set[str]:
    """Directories whose events concern the tailer: those of followed (and draining) files and,
    per pattern, every existing directory it can match files in, plus the deepest existing
    ancestor without wildcards (where a new rank directory would appear)."""
    dirs = {os.path.dirname(p) or "." for p in list(tailer.files)}
    dirs.update(os.path.dirname(f.path) or "." for f in list(tailer.draining))
    dirs.update(os.path.dirname(p) for p in draining_paths(tailer))
    for src in tailer.sources:
        for pattern in src.paths:
            d = _dir_of(pattern)
            if glob.has_magic(d):
                dirs.update(x for x in glob.glob(d) if os.path.isdir(x))
                while glob.has_magic(d):
                    d = os.path.dirname(d) or "."
            if os.path.isdir(d):
                dirs.add(d)
    return dirs


def draining_paths(tailer: Tailer) -> Set[str]:
    """Where the rotated-away files still followed live now (`train.log.1`, wherever they were
    renamed to): the name of the open descriptor, so the file is followed by inode. Files deleted
    since have no name left (their writer's lines are still read at the rescan)."""
    out: Set[str] = set()
    for f in list(tailer.draining):
        fh = f.fh
        if fh is None:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fh}")
        except OSError:
            continue
        if target.startswith("/") and not target.endswith(" (deleted)"):
            out.add(target)
    return out


def concerns(tailer: Tailer, path: str) -> bool:
    """Whether an event on `path` may change what the tailer reads: a followed file, a rotated-away
    file still drained (under its new name), a file a pattern matches, or a directory a
    pattern's directory part matches."""
    if path in tailer.files:
        return True
    if tailer.draining and path in draining_paths(tailer):
        return True
    for src in tailer.sources:
        for pattern in src.paths:
            pattern = os.path.expanduser(pattern)
            if fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, _dir_of(pattern)):
                return True
    return False


def unchanged_files(tailer: Tailer, paths: Iterable[str]) -> bool:
    """True when every changed path is a file already followed and still the same file (no
    rotation, deletion or new file to handle: no glob expansion needed) and nothing drains."""
    if tailer.draining:
        return False
    for p in paths:
        f = tailer.files.get(p)
        try:
            st = os.stat(p)
        except OSError:
            return False
        if f is None or (st.st_dev, st.st_ino) != (f.dev, f.ino):
            return False
    return True


def behind(tailer: Tailer) -> bool:
    """A backlog is left (the round budget ran out): the next round should start at once."""
    return any(f.behind_since is not None for f in list(tailer.files.values()) + list(tailer.draining))


def poll_paths(tailer: Tailer, consume: Consumer, now: float, paths: Iterable[str]) -> int:
    """Read what is new in these followed files only (a round triggered by their change events):
    no glob expansion and no stat of the files that did not change. Returns the bytes read."""
    budget = tailer.round_bytes
    for st in tailer.stats.values():
        st.lines_round = 0
    for p in sorted(set(paths)):
        f = tailer.files.get(p)
        if f is None or budget <= 0:
            continue
        src = next((s for s in tailer.sources if s.name == f.source), None)
        if src is None:
            continue
        try:
            budget -= tailer._follow(p, src, consume, now, False, budget)
            tailer._clear_error(p)
        except OSError as exc:
            tailer._set_error(p, src.name, f"{p}: {exc.strerror or exc}")
    tailer._update_gauges(now)
    return tailer.round_bytes - budget

"""Config paths that match nothing on this node: a mistyped glob must not watch nothing in silence.

Used by `check-config` and `probe` (printed) and by the daemon at start and on reload (logged).
A file that does not exist *yet* is normal before a job starts, so these are warnings, never
errors; the daemon's `path_unmatched` finding waits for `start_grace` before it says so.
"""

from __future__ import annotations

import glob
import os
from typing import List

from watchdog.config.schema import Config


def _matches(pattern: str) -> bool:
    return os.path.exists(pattern) if not glob.has_magic(pattern) else bool(glob.glob(pattern))


def _topmost_missing_dir(pattern: str) -> str:
    """The highest folder of the pattern's fixed part (before any wildcard) that does not exist;
    '' when they all exist. It points at the typo: `/data/rnu/logs/*.log` -> `/data/rnu`."""
    parts = pattern.split(os.sep)
    fixed = []
    for part in parts[:-1]:
        if glob.has_magic(part):
            break
        fixed.append(part)
    folder = os.sep.join(fixed)
    missing = ""
    while folder and not os.path.isdir(folder):
        missing, folder = folder, os.path.dirname(folder)
    return missing


def _describe(key: str, pattern: str) -> str:
    missing = _topmost_missing_dir(pattern)
    why = f"folder {missing} does not exist" if missing else "no file matches yet"
    return f"{key}: {pattern!r} matches nothing ({why})"


def unmatched_paths(config: Config) -> List[str]:
    """One readable line per configured path or glob of an enabled probe that matches nothing now."""
    out: List[str] = []
    probes = config.probes
    if probes.heartbeat.enabled and not config.fed_by_discovery("heartbeat"):
        out += [_describe(f"probes.heartbeat.paths[{i}]", p) for i, p in enumerate(probes.heartbeat.paths)
                if not _matches(p)]
    if probes.logs.enabled and not config.fed_by_discovery("logs"):
        for s_i, source in enumerate(probes.logs.sources):
            out += [_describe(f"probes.logs.sources[{s_i}].paths[{i}] ({source.name})", p)
                    for i, p in enumerate(source.paths) if not _matches(p)]
    if (probes.process.enabled and not config.fed_by_discovery("process") and probes.process.pid_file
            and not _matches(probes.process.pid_file)):
        out.append(_describe("probes.process.pid_file", probes.process.pid_file))
    state = os.path.abspath(config.paths.state_dir)
    for key, path in (("paths.state_dir", config.paths.state_dir), ("paths.snapshot_dir", config.paths.snapshot_dir)):
        parent = os.path.dirname(os.path.abspath(path or ""))
        inside_state = key != "paths.state_dir" and os.path.abspath(path or "").startswith(state + os.sep)
        if path and not inside_state and not os.path.isdir(path) and not os.path.isdir(parent):
            out.append(f"{key}: {path!r} does not exist and neither does its parent {parent} (a typo?)")
    return out

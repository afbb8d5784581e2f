"""Where a rank writes its heartbeat: the `NPU_WATCHDOG_HEARTBEAT` contract.

The daemon's job discovery reads the same variable from each rank's environment, so a job that
sets it once (in the launcher's environment) needs no path in the training script and no path in
the daemon's config. The value is one of:

- a path containing `{rank}`: the rank number is put in its place (`/data/hb/rank{rank}.json`);
- a directory (existing, or written with a trailing `/`): each rank writes `<dir>/rank<N>.json`;
- any other path: used as it is (one process, or one file shared on purpose).

The rank comes from the first of RANK, RANK_ID (MindSpore), OMPI_COMM_WORLD_RANK, PMI_RANK (MPI),
LOCAL_RANK that holds a number; 0 when none does. The flight recorder of a heartbeat file lives
next to it, with `.ring` appended (`rank3.json` -> `rank3.json.ring`).
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

ENV_VAR = "NPU_WATCHDOG_HEARTBEAT"
RANK_VARS = ("RANK", "RANK_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK")
RING_SUFFIX = ".ring"


def env_rank(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """This process's global rank from the launcher's environment, or None."""
    env = os.environ if environ is None else environ
    for key in RANK_VARS:
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return None


def resolve(spec: Optional[str] = None, rank: Optional[int] = None,
            environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The heartbeat file for `rank` from `spec` (default: the environment variable); None if unset."""
    env = os.environ if environ is None else environ
    if spec is None:
        spec = env.get(ENV_VAR, "").strip() or None
    if not spec:
        return None
    if rank is None:
        rank = env_rank(env)
    number = str(rank if rank is not None else 0)
    if "{rank}" in spec:
        return spec.replace("{rank}", number)  # not str.format: other braces stay as they are
    if spec.endswith(("/", os.sep)) or os.path.isdir(spec):
        return os.path.join(spec, "rank" + number + ".json")
    return spec


def ring_path(heartbeat_path: str) -> str:
    """The flight recorder file that belongs to a heartbeat file."""
    return heartbeat_path + RING_SUFFIX

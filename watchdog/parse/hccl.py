"""The job's HCCL timeouts: how long a peer of a failed rank waits before HCCL reports it.

After one rank dies (OOM, device fault), its peers block in the next collective and report an
HCCL timeout only after `HCCL_EXEC_TIMEOUT` (CANN default 1836 s), with `HCCL_CONNECT_TIMEOUT`
(default 120 s) for link set-up. Cascade folding must cover that span, not a fixed guess.

Where the values come from, first hit wins:
1. the ranks' environment, when the process probe can see it (`ProcessInfo.hccl_env`, filled
   by process discovery; the largest value over the ranks, as the slowest peer decides);
2. `job.hccl_exec_timeout` / `job.hccl_connect_timeout` in the config (set them when the
   environment is not visible and the job overrides the defaults);
3. the documented CANN defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple

from watchdog.parse.untrusted import ascii_number

#: CANN defaults (seconds), as documented for HCCL.
CANN_EXEC_TIMEOUT = 1836.0
CANN_CONNECT_TIMEOUT = 120.0
#: The environment variables read (only these, never the rest of a rank's environment).
ENV_KEYS = ("HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT")


@dataclass(frozen=True)
class HcclTimeouts:
    exec_timeout: float = CANN_EXEC_TIMEOUT
    connect_timeout: float = CANN_CONNECT_TIMEOUT
    #: Where exec_timeout came from: "env", "config" or "default".
    source: str = "default"


def _seconds(value: Any) -> Optional[float]:
    """A timeout from a rank's environment: ASCII digits only (another user's text), 0 < v < 10 days."""
    v = ascii_number(value) if isinstance(value, str) else (float(value) if isinstance(value, (int, float)) else None)
    return v if v is not None and 0 < v < 10 * 86400 else None


def from_env(envs: Iterable[Mapping[str, str]]) -> Optional[HcclTimeouts]:
    """The timeouts the ranks' environments set (largest over the ranks), None when none does.
    A variable missing or unreadable in every rank keeps its CANN default."""
    envs = list(envs)
    exe = [v for e in envs for v in [_seconds(e.get("HCCL_EXEC_TIMEOUT"))] if v is not None]
    con = [v for e in envs for v in [_seconds(e.get("HCCL_CONNECT_TIMEOUT"))] if v is not None]
    if not exe and not con:
        return None
    return HcclTimeouts(max(exe) if exe else CANN_EXEC_TIMEOUT, max(con) if con else CANN_CONNECT_TIMEOUT, "env")


def resolve(envs: Iterable[Mapping[str, str]], exec_timeout: Optional[float] = None,
            connect_timeout: Optional[float] = None) -> HcclTimeouts:
    """Environment, else config, else the CANN defaults (see the module docstring)."""
    got = from_env(list(envs))
    if got is not None:
        return got
    if exec_timeout is not None or connect_timeout is not None:
        return HcclTimeouts(exec_timeout if exec_timeout is not None else CANN_EXEC_TIMEOUT,
                            connect_timeout if connect_timeout is not None else CANN_CONNECT_TIMEOUT, "config")
    return HcclTimeouts()


def job_timeouts(hccl_envs: Sequence[Sequence[Tuple[str, str]]], config: Any) -> HcclTimeouts:
    """The watched job's timeouts, from its ranks' HCCL environments (each rank's `hccl_env` in
    the latest process observation) and the config."""
    envs = [dict(env) for env in hccl_envs if env]
    return resolve(envs, config.job.hccl_exec_timeout, config.job.hccl_connect_timeout)

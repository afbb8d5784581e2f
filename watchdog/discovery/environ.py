"""Reading a process environment without keeping its secrets.

A process environment holds tokens, passwords and keys. Only the keys named here (and the
configured job-name keys) are ever decoded and returned; the raw bytes are dropped at once and
nothing else from an environment is stored, logged or exported.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, Mapping, Optional

from watchdog.parse.untrusted import ascii_int

#: Global rank, in order of preference (PyTorch/torchrun, MindSpore, Open MPI, MPICH/Intel MPI, PMIx).
RANK_KEYS = ("RANK", "RANK_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
LOCAL_RANK_KEYS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
WORLD_SIZE_KEYS = ("WORLD_SIZE", "RANK_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
LOCAL_WORLD_SIZE_KEYS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")
DEVICE_KEYS = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_DEVICE_ID", "DEVICE_ID")
#: The devices the Ascend Docker runtime mounted into the rank's container (the node's NPU ids,
#: in the order the runtime numbers them from 0): the visible list when the rank sets none.
CONTAINER_DEVICES_KEY = "ASCEND_VISIBLE_DEVICES"
RENDEZVOUS_KEYS = ("MASTER_ADDR", "MASTER_PORT")
#: What the ranks of one job share when no launcher, rendezvous address or parent groups them (a
#: launch script that started them in the background and left): the HCCL rank table (MindSpore's
#: and the CANN samples' launch scripts) and msrun's scheduler address.
JOB_SHARED_KEYS = ("RANK_TABLE_FILE", "MS_SCHED_HOST", "MS_SCHED_PORT")
HCCL_KEYS = ("HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT", "HCCL_EVENT_TIMEOUT", "HCCL_ASYNC_ERROR_HANDLING")
#: Where CANN writes the process's plog files.
PLOG_KEYS = ("ASCEND_PROCESS_LOG_PATH",)
#: The heartbeat file of a rank; the trainer-side heartbeat helper reads the same variable.
HEARTBEAT_ENV = "NPU_WATCHDOG_HEARTBEAT"

BASE_KEYS: FrozenSet[str] = frozenset(
    RANK_KEYS + LOCAL_RANK_KEYS + WORLD_SIZE_KEYS + LOCAL_WORLD_SIZE_KEYS + DEVICE_KEYS + (CONTAINER_DEVICES_KEY,)
    + RENDEZVOUS_KEYS + JOB_SHARED_KEYS + HCCL_KEYS + PLOG_KEYS + (HEARTBEAT_ENV,))

#: A value longer than this is cut (a path or a number never needs more).
MAX_VALUE_CHARS = 1024


def wanted_keys(extra: Iterable[str] = ()) -> FrozenSet[str]:
    """The whitelist: the base keys plus the configured job-name keys."""
    return BASE_KEYS | frozenset(extra)


def parse_environ(raw: bytes, keys: FrozenSet[str]) -> Dict[str, str]:
    """The whitelisted `KEY=value` entries of a NUL-separated environment block; nothing else.

    Pure: malformed entries (no `=`, undecodable names) are skipped, values are decoded with
    replacement and cut to MAX_VALUE_CHARS.
    """
    out: Dict[str, str] = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if not sep or not name:
            continue
        try:
            key = name.decode("ascii")
        except UnicodeDecodeError:
            continue
        if key in keys and key not in out:
            out[key] = value[:MAX_VALUE_CHARS * 4].decode("utf-8", "replace")[:MAX_VALUE_CHARS]
    return out


def first_int(env: Mapping[str, str], keys: Iterable[str]) -> Optional[int]:
    """The first of `keys` whose value is a plain non-negative integer of ASCII digits (fewer than
    10: no rank, device or timeout is larger); any other value is as if the key were not set."""
    for key in keys:
        value = ascii_int(env.get(key, ""), 0, 999_999_999)
        if value is not None:
            return value
    return None


def rank_of(env: Dict[str, str]) -> Optional[int]:
    """The global rank named by the environment (RANK always wins), or None: not a rank."""
    return first_int(env, RANK_KEYS)

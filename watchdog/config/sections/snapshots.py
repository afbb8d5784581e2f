"""Config of failure snapshots: when to take one, what goes in, how long archives are kept.

The defaults aim at "a snapshot of every critical finding, never more than one per rule and job
every ten minutes, never filling the disk, never holding the alert back for long".
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from watchdog.compat import Literal  # 3.7: from typing_extensions

from pydantic import Field, field_validator

from watchdog.config.types import Duration, Size, StrictModel

#: Environment variables of the job worth keeping (exact names); secrets among them are redacted.
DEFAULT_ENV_NAMES = [
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    "OMP_NUM_THREADS", "LD_LIBRARY_PATH", "PYTHONPATH", "PATH", "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "TASK_QUEUE_ENABLE", "COMBINED_ENABLE", "MULTI_STREAM_MEMORY_REUSE", "INF_NAN_MODE_ENABLE",
]
#: Prefixes of environment variables worth keeping.
DEFAULT_ENV_PREFIXES = ["ASCEND_", "HCCL_", "HCCN_", "PYTORCH_NPU_", "NPU_", "TORCH_NPU_", "ACL_", "TE_", "GE_"]


def _octal_mode(value: Any) -> int:
    # YAML 1.1 reads an unquoted 0600 as the integer 384; a quoted "0600" is a string.
    if isinstance(value, bool):
        raise ValueError("expected an octal file mode like \"0600\"")
    if isinstance(value, str):
        try:
            value = int(value, 8)
        except ValueError:
            raise ValueError("expected an octal file mode like \"0600\"") from None
    if not isinstance(value, int) or not 0 <= value <= 0o777:
        raise ValueError("expected an octal file mode like \"0600\"")
    if value & 0o002:
        # Anyone on the node could then swap an archive's evidence, or fill the folder.
        raise ValueError(f"mode {value:04o} is writable by every user; use e.g. \"0600\" or \"0640\"")
    return value


class SnapshotRulePolicy(StrictModel):
    """Per-rule override of the snapshot policy, keyed by finding rule (e.g. `stall`)."""

    #: true: snapshot this rule at any severity; false: never; unset: by `min_severity`.
    enabled: Optional[bool] = None
    #: Rate limit for this rule (per job) instead of `min_interval`.
    min_interval: Optional[Duration] = None


class SnapshotsConfig(StrictModel):
    """Failure snapshots are off until `enabled: true` (the on-demand command works regardless)."""

    #: Take an evidence snapshot when an alert of `min_severity` or above starts firing.
    enabled: bool = False
    #: Findings at or above this severity get a snapshot when they start firing. A finding's own
    #: `snapshot` flag and `rules.<rule>.enabled` override it.
    min_severity: Literal["info", "warning", "critical"] = "critical"
    rules: Dict[str, SnapshotRulePolicy] = Field(default_factory=dict)
    #: At most one snapshot per rule and job in this interval (a flapping stall runs py-spy once).
    min_interval: Duration = Field(default="10m")
    #: Total collection time; then the archive is finished with what it has (the manifest says what is missing).
    budget: Duration = Field(default="20s")
    #: Snapshots captured at the same time; more requests meanwhile are skipped (reason `busy`).
    max_concurrent: int = Field(default=2, ge=1, le=8)
    #: Collection threads per snapshot (py-spy runs one per process in parallel).
    workers: int = Field(default=8, ge=1, le=64)

    # -- retention (oldest archives go first) --
    #: Archives kept at most.
    keep: int = Field(default=50, ge=1, le=100_000)
    #: Total size of all archives kept at most.
    max_total_size: Size = Field(default="2GiB")
    #: Archives older than this are deleted.
    max_age: Duration = Field(default="14d")
    #: Below this free space on the snapshot filesystem no snapshot is taken (reason `low_disk`).
    min_free_space: Size = Field(default="1GiB")
    #: Permissions of archives and of the snapshot directory.
    file_mode: int = 0o600
    #: Permissions of the snapshot folder (octal, owner only by default).
    dir_mode: int = 0o700

    # -- what goes in --
    #: Tail of every watched log, heartbeat file and plog file: at most this many lines ...
    log_tail_lines: int = Field(default=2000, ge=1, le=10_000_000)
    #: ... and at most this many bytes.
    log_tail_size: Size = Field(default="1MiB")
    #: Root of CANN logs of the job's processes (plog files under `<root>/debug/plog`, `<root>/run/plog`
    #: or `<root>/plog`). `~` is the home of the process owner. Unset: the process's
    #: $ASCEND_PROCESS_LOG_PATH, else `~/ascend/log`.
    plog_root: Optional[str] = None
    #: Newest plog files kept per process.
    plog_files: int = Field(default=3, ge=0, le=1000)
    #: The py-spy program (an optional dependency: `pip install 'npu-watchdog[stacks]'`).
    py_spy: str = "py-spy"
    #: Ask py-spy for native frames too (retried without them where that fails).
    py_spy_native: bool = True
    #: Timeout of one py-spy dump (its process group is killed on expiry).
    stack_timeout: Duration = Field(default="5s")
    #: Python stacks are taken of at most this many processes (ranks first, then their children).
    max_stack_processes: int = Field(default=32, ge=0, le=4096)
    #: Lines of `dmesg` kept (0: none).
    dmesg_lines: int = Field(default=300, ge=0, le=1_000_000)
    #: Job environment variables kept, by exact name and by prefix (values of secret-looking names
    #: are always redacted).
    env_names: List[str] = Field(default_factory=lambda: list(DEFAULT_ENV_NAMES))
    #: Prefixes of job environment variables kept in the snapshot (e.g. `HCCL_`, `ASCEND_`).
    env_prefixes: List[str] = Field(default_factory=lambda: list(DEFAULT_ENV_PREFIXES))
    #: Version files recorded in the manifest's versions.
    driver_version_file: str = "/usr/local/Ascend/driver/version.info"
    #: CANN version files (globs) recorded in the manifest's versions.
    cann_version_files: List[str] = Field(default_factory=lambda: [
        "/usr/local/Ascend/ascend-toolkit/latest/version.cfg",
        "/usr/local/Ascend/ascend-toolkit/latest/*/ascend_toolkit_install.info",
        "/usr/local/Ascend/cann/version.cfg",
    ])

    @field_validator("file_mode", "dir_mode", mode="before")
    @classmethod
    def _mode(cls, v: Any) -> int:
        return _octal_mode(v)

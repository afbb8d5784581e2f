"""What every collector of one capture shares: config, deadline, the bundle, the job's processes."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from watchdog.runtime import Runtime
from watchdog.snapshots.bundle import Bundle


@dataclass
class ProcRecord:
    """One process of the job's tree, as recorded in processes/tree.json."""

    pid: int
    ppid: Optional[int]
    #: True for the processes the process probe reported (the ranks / launcher), False for descendants.
    root: bool
    rank: Optional[int] = None
    name: str = ""
    cmdline: List[str] = field(default_factory=list)
    state: str = ""
    cpu_user_seconds: Optional[float] = None
    cpu_system_seconds: Optional[float] = None
    rss_bytes: Optional[int] = None
    threads: Optional[int] = None
    open_files: Optional[int] = None
    create_time: Optional[float] = None
    uid: Optional[int] = None
    username: Optional[str] = None
    error: Optional[str] = None

    @property
    def looks_python(self) -> bool:
        text = " ".join([self.name] + self.cmdline[:1]).lower()
        return "python" in text or "torchrun" in text


@dataclass
class CaptureContext:
    config: Any  # watchdog.config.schema.Config
    runtime: Optional[Runtime]
    bundle: Bundle
    deadline: float  # time.monotonic()
    #: Processes to start the tree from: pid -> rank (None when unknown).
    roots: Dict[int, Optional[int]] = field(default_factory=dict)
    tree: List[ProcRecord] = field(default_factory=list)
    #: Versions that matter, filled by several collectors (written into the manifest).
    versions: Dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def scfg(self) -> Any:
        return self.config.snapshots

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def timeout(self, wanted: float) -> float:
        """A subprocess timeout that never outlives the capture's budget (but is never zero)."""
        return max(0.2, min(wanted, self.remaining()))

    def set_version(self, key: str, value: Any) -> None:
        with self._lock:
            self.versions[key] = value

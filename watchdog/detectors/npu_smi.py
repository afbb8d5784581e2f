"""npu-smi health detectors (built by their feature; until then they find nothing)."""

from __future__ import annotations

from typing import List

from watchdog.config.schema import Config
from watchdog.findings import Finding
from watchdog.state import StateView


def detect(view: StateView, config: Config) -> List[Finding]:
    return []

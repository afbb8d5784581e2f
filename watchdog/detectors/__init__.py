"""Detector registry: pure functions `detect(view, config) -> list[Finding]`.

Detectors never do I/O and never keep state of their own: everything they need is in the
StateView (latest observations, per-probe history, probe health, the daemon's start time), so they
are tested on synthetic views and give the same answer for the same input.
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable, List, Tuple

from watchdog.config.schema import Config
from watchdog.findings import Finding
from watchdog.state import StateView

log = logging.getLogger(__name__)

Detector = Callable[[StateView, Config], List[Finding]]

#: Modules whose `detect` contributes findings.
DETECTOR_MODULES = (
    "watchdog.detectors.core",
    "watchdog.detectors.liveness",
    "watchdog.detectors.npu_smi",
    "watchdog.detectors.npu",
    "watchdog.detectors.stall",
    "watchdog.detectors.logs",
)


def load_detectors() -> List[Tuple[str, Detector]]:
    return [(m.rsplit(".", 1)[1], importlib.import_module(m).detect) for m in DETECTOR_MODULES]


def run_detectors(detectors: List[Tuple[str, Detector]], view: StateView, config: Config) -> Tuple[List[Finding], List[str]]:
    """Run every detector; one that raises is reported (as an error string), never fatal."""
    findings: List[Finding] = []
    errors: List[str] = []
    for name, fn in detectors:
        try:
            findings.extend(fn(view, config))
        except Exception as exc:  # a detector bug must not blind the others
            log.exception("detector %s failed", name)
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    return findings, errors

"""A logs probe on files under a test's folder, built from a config as the daemon builds it (shared
by tests/unit/test_reload_discard.py, test_job_restarts.py and test_restart_state.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Tuple

from watchdog.config.load import load_config_text
from watchdog.probes.logs import LogsProbe


def logs_probe(tmp_path: Path, pattern: str = "rank*.log") -> LogsProbe:
    """One `train` source following `tmp_path/pattern`, its state in `tmp_path/state`."""
    cfg = load_config_text(
        f"probes: {{logs: {{enabled: true, sources: [{{name: train, paths: ['{tmp_path}/{pattern}']}}]}}}}")
    return LogsProbe(cfg.probes.logs, str(tmp_path / "state"))


def following_logs_probe(tmp_path: Path) -> Tuple[LogsProbe, Path]:
    """A logs probe on an empty `tmp_path/rank0.log`, one round run (it follows from the end):
    lines appended to the returned path are the next round's."""
    (tmp_path / "state").mkdir()
    log = tmp_path / "rank0.log"
    log.write_text("")
    p = logs_probe(tmp_path)
    p.collect()
    return p, log

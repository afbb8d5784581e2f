"""The composition root lists every plugin the plugin folders hold: a module that declares a
probe, detector, summary, metric rows or a channel but is missing from `watchdog/plugins_list.py`
would silently never run. The folders are read as source (not imported), so a forgotten module is
found whether or not anything imports it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Set

import watchdog.plugins_list as root
from tests.helpers import REPO

PKG = REPO / "watchdog"


def _top_names(path: Path) -> Set[str]:
    """Names a module binds at its top level (assignments, functions, classes)."""
    out: Set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _declaring(folder: str, *needs: str) -> Set[str]:
    found = set()
    for path in sorted((PKG / folder).glob("*.py")):
        if path.name != "__init__.py" and set(needs) <= _top_names(path):
            found.add("watchdog." + folder.replace("/", ".") + "." + path.stem)
    return found


def _channel_classes() -> Set[str]:
    out = set()
    for path in sorted((PKG / "alerting" / "deliver" / "channels").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "type" for t in stmt.targets)
                        and isinstance(stmt.value, ast.Constant) and stmt.value.value):
                    out.add(f"watchdog.alerting.deliver.channels.{path.stem}.{node.name}")
    return out


def test_every_plugin_in_the_folders_is_listed_in_the_root():
    listed: Dict[str, Set[str]] = {
        "probes": {m.__name__ for m in root.PROBE_MODULES},
        "detectors": {m.__name__ for m in root.DETECTOR_MODULES},
        "summaries": {m.__name__ for m in root.SUMMARY_MODULES},
        "metrics": {m.__name__ for m in root.METRIC_MODULES},
        "probe metrics": {m.__name__ for m in root.PROBE_METRIC_MODULES},
        "channels": {f"{c.__module__}.{c.__name__}" for c in root.CHANNELS},
        "evaluators": {m.__name__ for m in root.METRIC_EVALUATORS},
    }
    declared = {
        "probes": _declaring("probes", "ORDER", "build"),
        "detectors": _declaring("detectors", "detect", "RULES"),
        "summaries": _declaring("summaries", "PROBE", "Summary"),
        "metrics": _declaring("metrics", "ORDER", "METRICS"),
        "probe metrics": _declaring("probes", "METRICS"),
        "channels": _channel_classes(),
        "evaluators": _declaring("metrics", "ORDER", "METRICS", "evaluate") | _declaring("probes", "METRICS", "evaluate"),
    }
    assert declared["probes"] and declared["detectors"] and declared["channels"]
    assert listed == declared


def test_the_root_hands_down_what_it_lists():
    from watchdog.alerting.deliver.channels import CHANNEL_CLASSES
    from watchdog.config.schema import PROBE_SECTIONS
    from watchdog.detectors import detector_modules
    from watchdog.probes import probe_modules

    assert [s.key for s in PROBE_SECTIONS] == [m.SECTION.key for m in sorted(root.PROBE_MODULES, key=lambda m: m.ORDER)]
    assert [s.key for s in PROBE_SECTIONS][:5] == ["process", "heartbeat", "npu", "logs", "kernel"]
    assert probe_modules()[0] == "watchdog.probes.process"
    assert set(detector_modules()) == {m.__name__ for m in root.DETECTOR_MODULES}
    assert set(CHANNEL_CLASSES) == {c.type for c in root.CHANNELS}

"""The typed wiring: a frozen config changed only by building a new one, the size of the daemon's
and the scheduler's classes and functions, and reflection on the daemon's own objects."""

from __future__ import annotations

import ast
import os
import runpy

import pytest
from pydantic import ValidationError

from tests.helpers import REPO
from watchdog.config.load import load_config_text, with_state_dir
from watchdog.core.state import FailureReason

#: The limits of issue 26 (docs/architecture.md).
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60
MAX_RUNTIME_REFLECTION = 10


def test_a_loaded_config_is_frozen_to_the_leaves():
    cfg = load_config_text("probes: {npu: {enabled: true}}\n")
    with pytest.raises(ValidationError, match="frozen"):
        cfg.probes.npu.enabled = False  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        cfg.paths = cfg.paths  # type: ignore[misc]


def test_a_state_dir_override_is_a_new_config(tmp_path):
    cfg = load_config_text(f"paths: {{state_dir: {tmp_path / 'a'}}}\n")
    moved = with_state_dir(cfg, str(tmp_path / "b"))
    assert moved is not cfg and moved.paths.snapshot_dir == str(tmp_path / "b" / "snapshots")
    assert cfg.paths.state_dir == str(tmp_path / "a")


def test_discovery_switches_its_probes_on_while_the_config_is_built():
    cfg = load_config_text("discovery: {enabled: true, feed: [process, logs]}\n")
    assert cfg.probes.process.enabled and cfg.probes.logs.enabled
    assert cfg.fed_by_discovery("process") and not cfg.fed_by_discovery("heartbeat")
    job = cfg.for_job("train-a")
    assert job.job.name == "train-a" and job.base_labels["training_job"] == "train-a"
    assert "training_job" not in cfg.base_labels  # the node's own config is untouched


def test_failure_reasons_are_the_npu_smi_reasons_and_the_generic_ones():
    from watchdog.npusmi.run import REASONS

    assert set(REASONS) <= {r.value for r in FailureReason}


@pytest.mark.parametrize("path", ["watchdog/daemon.py", "watchdog/scheduler.py"])
def test_no_long_class_or_function(path):
    tree = ast.parse((REPO / path).read_text())
    too_long = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            if lines > limit:
                too_long.append(f"{node.name}: {lines} lines (limit {limit})")
    assert not too_long, f"{path}: {too_long}"


def test_reflection_on_runtime_objects_stays_rare():
    """Counted by scripts/count_reflection.py (its table says what counts as a runtime object)."""
    script = runpy.run_path(str(REPO / "scripts" / "count_reflection.py"))
    root = str(REPO / "watchdog")
    runtime = [f"{path}:{line}: {fn}({receiver})" for path, line, fn, receiver in script["calls"](root)
               if script["category"](os.path.relpath(path, REPO), receiver) == "runtime"]
    assert len(runtime) < MAX_RUNTIME_REFLECTION, runtime


def test_no_reflection_on_probe_records():
    """Probe records are read through their typed keys (`view.latest(NPU).value.absent`), never
    asked with getattr/hasattr what they hold (scripts/count_reflection.py, "observation")."""
    script = runpy.run_path(str(REPO / "scripts" / "count_reflection.py"))
    root = str(REPO / "watchdog")
    on_records = [f"{path}:{line}: {fn}({receiver})" for path, line, fn, receiver in script["calls"](root)
                  if script["category"](os.path.relpath(path, REPO), receiver) == "observation"]
    assert on_records == []


def test_the_reflection_count_sees_a_read_of_a_probe_record(tmp_path):
    """The counter itself: a getattr on a sample's record is counted as one."""
    script = runpy.run_path(str(REPO / "scripts" / "count_reflection.py"))
    (tmp_path / "planted.py").write_text("def f(sample):\n    return getattr(sample.value, 'active', ())\n")
    found = [(fn, receiver) for _path, _line, fn, receiver in script["calls"](str(tmp_path))]
    assert found == [("getattr", "sample.value")]
    assert script["category"]("watchdog/detectors/planted.py", "sample.value") == "observation"

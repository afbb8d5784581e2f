"""Hostile configs: each is refused with exit 2 and a specific message, never a hang or a traceback.

Runs the real `check-config` command with a hard time bound per case (a hang bound: the old loader
never returned on some of these).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.hostile_configs import BILLION_LAUGHS
from watchdog.config import ConfigError, load_config_text

HANG_BOUND = 60.0

def check_config(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "watchdog", "check-config", "-c", str(path)],
                          capture_output=True, text=True, cwd=str(REPO), timeout=HANG_BOUND)


def refused(tmp_path: Path, text: str, *expected: str) -> str:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    out = check_config(cfg)
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr
    for e in expected:
        assert e in out.stderr, out.stderr
    return out.stderr


def test_billion_laughs_is_refused(tmp_path):
    refused(tmp_path, BILLION_LAUGHS, "aliases", "config.yaml:")


def test_recursive_anchor_is_refused(tmp_path):
    refused(tmp_path, "probes: &p\n  commands: *p\n", "recursive anchor")
    refused(tmp_path, "x: &a [1, *a]\n", "recursive anchor")


def test_deep_nesting_is_refused(tmp_path):
    refused(tmp_path, "x: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than")
    refused(tmp_path, "x:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 60)), "nested deeper than")


def test_huge_integer_is_refused(tmp_path):
    refused(tmp_path, "snapshots:\n  log_tail_lines: " + "9" * 5000 + "\n", "integer with 5000 digits")


def test_size_and_duration_overflow_are_refused(tmp_path):
    refused(tmp_path, "snapshots:\n  max_total_size: " + "9" * 40 + "GiB\n", "snapshots.max_total_size")
    refused(tmp_path, "snapshots:\n  max_total_size: " + "9" * 400 + "GiB\n", "snapshots.max_total_size")
    refused(tmp_path, "probes:\n  jitter: " + "9" * 300 + "d\n", "probes.jitter")


def test_duplicate_keys_name_both_lines(tmp_path):
    text = "node:\n  name: a\nprobes:\n  jitter: 1s\nnode:\n  name: b\n"
    err = refused(tmp_path, text, "duplicate key 'node' at line 5 (first given at line 1)")
    assert "config.yaml:5:" in err


def test_secret_file_on_dev_zero_or_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        refused(tmp_path, "alerting:\n  channels:\n    - {type: webhook, name: w, url_file: %s}\n" % path,
                "alerting.channels[0]", "url_file", "not a regular file")


def test_config_file_itself_bounded(tmp_path):
    out = subprocess.run([sys.executable, "-m", "watchdog", "check-config", "-c", "/dev/zero"],
                         capture_output=True, text=True, cwd=str(REPO), timeout=HANG_BOUND)
    assert out.returncode == 2 and "not a regular file" in out.stderr, out.stderr
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    out = check_config(big)
    assert out.returncode == 2 and "larger than" in out.stderr, out.stderr


@pytest.mark.parametrize("text,where", [
    ("probes:\n  heartbeat: {learn: {factor: .inf}}\n", "probes.heartbeat.learn.factor"),
    ("probes:\n  heartbeat: {learn: {factor: .nan}}\n", "probes.heartbeat.learn.factor"),
    ("http: {listen: '127.0.0.1:99999999999999999999'}\n", "http.listen"),
])
def test_infinite_or_out_of_range_values(text, where):
    with pytest.raises(ConfigError) as ei:
        load_config_text(text)
    assert where in str(ei.value)


def _int_fields(model, seen=None):
    """(model, field name, field info) of every int field reachable from `model`."""
    import typing
    from pydantic import BaseModel
    seen = set() if seen is None else seen
    if model in seen:
        return
    seen.add(model)
    for name, info in model.model_fields.items():
        ann = info.annotation
        args = typing.get_args(ann) or (ann,)
        for a in args + tuple(x for arg in args for x in typing.get_args(arg)):
            if isinstance(a, type) and issubclass(a, BaseModel):
                yield from _int_fields(a, seen)
        if int in args and bool not in args:
            yield model, name, info, info.metadata
        for arg in args:   # List[Annotated[int, ...]]: the items' bounds
            for item in typing.get_args(arg):
                if typing.get_origin(item) is typing.Annotated and typing.get_args(item)[0] is int:
                    yield model, name, info, typing.get_args(item)[1:]


def test_every_integer_setting_has_an_upper_bound():
    """An unbounded count (`log_tail_lines: 100000000000`) is accepted today and then allocates,
    loops or sleeps on it at run time; every int setting says its largest sane value."""
    from watchdog.config.schema import Config
    from watchdog.config.types import parse_size
    validated_elsewhere = {"file_mode", "dir_mode"}   # octal modes, bounded by their validator

    def bounded(meta) -> bool:
        # sizes are bounded by their parser (8 EiB) and, where they are buffers, by a validator
        return any(hasattr(c, "le") or hasattr(c, "lt") or getattr(c, "func", None) is parse_size
                   for c in meta)
    unbounded = [f"{m.__name__}.{n}" for m, n, info, meta in _int_fields(Config)
                 if n not in validated_elsewhere and not bounded(meta)]
    assert not unbounded, unbounded


def test_out_of_range_counts_and_world_writable_modes_are_refused(tmp_path):
    refused(tmp_path, "snapshots:\n  log_tail_lines: 100000000000\n", "snapshots.log_tail_lines",
            "less than or equal to 10000000")
    refused(tmp_path, "probes:\n  logs:\n    slice_size: 8GiB\n", "slice_size must be at most 1GiB")
    refused(tmp_path, "trends:\n  npus: [0, 99999]\n", "trends.npus")
    refused(tmp_path, "snapshots:\n  file_mode: \"0666\"\n", "snapshots.file_mode", "writable by every user")

"""Config validation: every error names its key path and value; secrets never print."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.config import ConfigError, load_config_text
from watchdog.config.types import format_duration, parse_duration, parse_size
from tests.helpers import REPO


def check_config(path: Path, *args: str, env=None):
    return subprocess.run([sys.executable, "-m", "watchdog", "check-config", "-c", str(path), *args],
                          capture_output=True, text=True, cwd=str(REPO), env=env)


@pytest.mark.parametrize("text,seconds", [
    ("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("2d", 172800), ("1.5s", 1.5),
])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["5 minutes", "5", "", "m5", "1h 30m", "-5s", "5sec", 10, True, None])
def test_bad_durations(bad):
    with pytest.raises(ValueError, match="expected a duration like 30s or 5m"):
        parse_duration(bad)


def test_format_duration_roundtrip():
    for s in (0.25, 1, 59, 60, 3600 + 61, 86400 * 2 + 5):
        assert parse_duration(format_duration(s)) == pytest.approx(s)


@pytest.mark.parametrize("text,size", [("512MiB", 512 * 2**20), ("2GiB", 2 * 2**30), ("100MB", 10**8), ("10B", 10)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["512", "2 GB per node", "1.5XB", 100])
def test_bad_sizes(bad):
    with pytest.raises(ValueError, match="expected a size like 512MiB or 2GiB"):
        parse_size(bad)


BROKEN = [
    ("probes:\n  commands:\n    - {name: a, argv: [x], interval: 5 minutes}\n",
     "probes.commands[0].interval: expected a duration like 30s or 5m, got '5 minutes'"),
    ("probes:\n  jitter: 10\n", "probes.jitter: expected a duration like 30s or 5m, got 10"),
    ("nodes: {name: x}\n", "nodes: unknown key"),
    ("probes:\n  process: {intervall: 5s}\n", "probes.process.intervall: unknown key"),
    ("http: {listen: localhost}\n", "http.listen: expected host:port"),
    ("logging: {level: verbose}\n", "logging.level:"),
    ("job: {name: 'has space'}\n", "job.name: expected letters, digits"),
    ("probes:\n  commands:\n    - {name: a, argv: []}\n", "probes.commands[0].argv:"),
    ("probes:\n  commands:\n    - {argv: [x]}\n", "probes.commands[0].name: required key is missing"),
    ("probes:\n  commands:\n    - {name: a, argv: [x], severity: fatal}\n", "probes.commands[0].severity:"),
    ("probes:\n  commands:\n    - {name: a, argv: [x]}\n    - {name: a, argv: [y]}\n", "duplicate name 'a'"),
    ("node: {name: '${NO_SUCH_VARIABLE_X}'}\n", "node.name: environment variable NO_SUCH_VARIABLE_X is not set"),
    ("- just\n- a list\n", "(top level): expected a mapping"),
]


@pytest.mark.parametrize("text,message", BROKEN)
def test_check_config_reports_key_path(tmp_path, text, message):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    res = check_config(cfg)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr, res.stderr


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("node:\n  name: a\nprobes: [\n  jitter: 1s\n")
    res = check_config(cfg)
    assert res.returncode == 2
    assert f"{cfg}:" in res.stderr and "YAML syntax error" in res.stderr
    # file:line:column with numbers
    loc = res.stderr.split(f"{cfg}:")[2].split(":")[:2]
    assert all(part.strip().isdigit() for part in loc), res.stderr


def test_missing_config_file(tmp_path):
    res = check_config(tmp_path / "nope.yaml")
    assert res.returncode == 2 and "no such file" in res.stderr


def test_every_error_is_reported_at_once():
    with pytest.raises(ConfigError) as exc:
        load_config_text("foo: 1\nprobes: {jitter: x, history: y}\n")
    assert len(exc.value.errors) == 3


def test_env_substitution_and_defaults(monkeypatch):
    monkeypatch.setenv("NW_TEST_NODE", "n-7")
    cfg = load_config_text("node: {name: '${NW_TEST_NODE}'}\njob: {name: '${NW_UNSET_JOB:-fallback}'}\n")
    assert cfg.node.name == "n-7" and cfg.job.name == "fallback"


def test_state_dir_defaults_to_systemd_state_directory(monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/npu-watchdog:/other")
    cfg = load_config_text("")
    assert cfg.paths.state_dir == "/var/lib/npu-watchdog"
    assert cfg.paths.snapshot_dir == "/var/lib/npu-watchdog/snapshots"


def test_secret_file_is_read_and_redacted(tmp_path):
    """`<key>_file` secrets are read, and check-config never prints them."""
    from pydantic import Field

    from watchdog.config.types import Secret, StrictModel, secret_value

    class Chan(StrictModel):
        url: Secret
        note: str = ""

    secret = tmp_path / "url"
    secret.write_text("https://hooks.example.invalid/T000/very-secret-token\n")
    chan = Chan.model_validate({"url_file": str(secret)})
    assert secret_value(chan.url) == "https://hooks.example.invalid/T000/very-secret-token"
    assert "very-secret-token" not in repr(chan) and "very-secret-token" not in str(chan.model_dump())
    with pytest.raises(Exception, match="cannot read"):
        Chan.model_validate({"url_file": str(tmp_path / "missing")})
    with pytest.raises(Exception, match="either url or url_file"):
        Chan.model_validate({"url": "x", "url_file": str(secret)})
    assert Field  # imported for pydantic's sake


def test_example_config_passes(tmp_path):
    res = check_config(REPO / "config" / "npu-watchdog.example.yaml")
    assert res.returncode == 0, res.stderr
    assert "valid" in res.stdout


def test_check_config_json_output(tmp_path):
    import json

    cfg = tmp_path / "c.yaml"
    cfg.write_text("node: {name: n1}\nprobes: {jitter: 2s}\n")
    res = check_config(cfg, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["node"]["name"] == "n1" and data["probes"]["jitter"] == 2.0

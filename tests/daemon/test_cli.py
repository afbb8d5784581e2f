"""Operator commands: probe (one round, no daemon) and status (asks the daemon)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import yaml

from tests.helpers import REPO, wait_for


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True,
                          cwd=str(REPO), timeout=60, **kw)


def test_version():
    from watchdog import __version__

    from watchdog.release import short_commit

    res = run_cli("--version")
    # this checkout's own HEAD (read from .git), or `unknown` in a copy without its history
    assert res.returncode == 0 and res.stdout.strip() == f"npu-watchdog {__version__} (commit {short_commit()})"
    assert re.fullmatch(r"[0-9a-f]{12}|unknown", short_commit())


#: Heavy imports that `--version` / `--help` must not pay for (pydantic alone was most of 0.4 s).
_HEAVY = ("pydantic", "yaml", "prometheus_client", "apscheduler", "psutil", "urllib.request",
          "watchdog.config.schema", "watchdog.daemon", "watchdog.logrules.matcher")


def test_version_and_help_import_no_subcommand_machinery():
    """Counted, not timed: the modules loaded by `--version` and `--help`."""
    probe = ("import sys, runpy\n"
             "sys.argv = ['npu-watchdog'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('watchdog', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             f"print('LOADED', sorted(m for m in {_HEAVY!r} if m in sys.modules), file=sys.stderr)\n")
    for flag in ("--version", "--help"):
        res = subprocess.run([sys.executable, "-c", probe, flag], capture_output=True, text=True,
                             cwd=str(REPO), timeout=60)
        assert "LOADED []" in res.stderr, (flag, res.stderr[-500:])
        assert "npu-watchdog" in res.stdout


def test_no_command_prints_help_and_exits_2():
    res = run_cli()
    assert res.returncode == 2 and "COMMAND" in res.stderr


def test_probe_runs_each_probe_once(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "node": {"name": "n1"}, "job": {"name": "j1"}, "paths": {"state_dir": str(tmp_path / "s")},
        "probes": {"commands": [
            {"name": "good", "argv": ["/bin/true"]},
            {"name": "bad", "argv": ["/bin/sh", "-c", "echo disk gone; exit 3"], "severity": "critical",
             "hint": "check the disk"},
        ]},
    }))
    res = run_cli("probe", "-c", str(cfg), "--json")
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    probes = {p["name"]: p for p in data["probes"]}
    assert probes["command:good"]["up"] and probes["command:good"]["observation"]["returncode"] == 0
    assert probes["command:bad"]["observation"]["returncode"] == 3
    (f,) = data["findings"]
    assert f["rule"] == "command_check" and f["severity"] == "critical"
    assert f["labels"] == {"host": "n1", "training_job": "j1", "check": "bad"}
    assert f["evidence"] == ["disk gone"] and f["hint"] == "check the disk"
    text = run_cli("probe", "-c", str(cfg))
    assert "[critical] command_check: check bad exited 3" in text.stdout


def test_probe_prints_no_secret_of_a_heartbeat_or_the_config(tmp_path):
    """`probe` prints observations whole (a heartbeat's extra fields): what the daemon redacts is
    redacted there too, a credential-named field and the configured webhook's URL."""
    hook = "https://hooks.example/x/T0kenInTheHookPath9876543210"
    hb = tmp_path / "hb.json"
    hb.write_text(json.dumps({"step": 12, "time": 1.0e9, "wandb_api_key": "wb-9f8e7d6c5b4a", "notify": hook}))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "node": {"name": "n1"}, "job": {"name": "j1"}, "paths": {"state_dir": str(tmp_path / "s")},
        "probes": {"heartbeat": {"enabled": True, "paths": [str(hb)]}},
        "alerting": {"channels": [{"type": "webhook", "name": "h", "url": hook}]},
    }))
    for args in (("--json",), ()):
        res = run_cli("probe", "-c", str(cfg), *args)
        assert res.returncode in (0, 1), res.stderr
        out = res.stdout + res.stderr
        assert "heartbeat" in out and "wb-9f8e7d6c5b4a" not in out and "T0kenInTheHookPath" not in out, out
    assert "wandb_api_key" in run_cli("probe", "-c", str(cfg), "--json").stdout  # the field, not its value


def test_status_talks_to_the_daemon(make_daemon):
    d = make_daemon({"probes": {"jitter": "0s", "commands": [{"name": "ok", "argv": ["/bin/true"], "interval": "1s"}]}})
    wait_for(lambda: d.status()["probes"][0]["up"], what="first round")
    res = run_cli("status", "-c", str(d.config_path))
    assert res.returncode == 0, res.stderr
    assert "up   command:ok" in res.stdout and "findings in force: 0" in res.stdout
    res = run_cli("status", "--url", d.url, "--json")
    assert json.loads(res.stdout)["probes"][0]["name"] == "command:ok"
    d.stop()
    res = run_cli("status", "--url", d.url)
    assert res.returncode == 1 and "cannot reach the daemon" in res.stderr


def test_state_dir_override_keeps_an_explicit_snapshot_dir(tmp_path):
    from watchdog.config.load import load_config_text, with_state_dir

    explicit = load_config_text(f"paths: {{state_dir: {tmp_path / 'a'}, snapshot_dir: {tmp_path / 'snaps'}}}")
    moved = with_state_dir(explicit, str(tmp_path / "b"))
    assert moved.paths.state_dir == str(tmp_path / "b")
    assert moved.paths.snapshot_dir == str(tmp_path / "snaps")
    assert explicit.paths.state_dir == str(tmp_path / "a")  # a new config; the loaded one is frozen
    derived = load_config_text(f"paths: {{state_dir: {tmp_path / 'a'}}}")
    assert with_state_dir(derived, str(tmp_path / "b")).paths.snapshot_dir == str(tmp_path / "b" / "snapshots")


def test_discover_prints_each_jobs_ranks_under_its_own_header(tmp_path):
    """Two jobs: every rank line sits under the header of the job it belongs to."""
    from tests.jobkit import TrainJob

    cfg = tmp_path / "c.yaml"
    with TrainJob(tmp_path / "a", ranks=2, port="29511", env={"NPU_WATCHDOG_JOB": "job-a"}) as a, \
            TrainJob(tmp_path / "b", ranks=3, port="29512", tag=a.tag, env={"NPU_WATCHDOG_JOB": "job-b"}):
        cfg.write_text(f"discovery:\n  enabled: true\n  only_env: '{a.only_env}'\n")
        res = run_cli("discover", "-c", str(cfg))
    assert res.returncode == 0, res.stderr
    under: dict = {}
    job = None
    for line in res.stdout.splitlines():
        if not line.startswith("  "):
            job = line.split(":", 1)[0]
            under[job] = []
        elif line.startswith("  rank "):
            under[job].append(line)
    assert sorted(under) == ["job-a", "job-b"], res.stdout
    assert len(under["job-a"]) == 2 and len(under["job-b"]) == 3, res.stdout
    assert all(str(tmp_path / "a") in ln for ln in under["job-a"]), res.stdout
    assert all(str(tmp_path / "b") in ln for ln in under["job-b"]), res.stdout


def test_discover_help_documents_its_exit_codes():
    res = run_cli("discover", "--help")
    text = " ".join(res.stdout.split())
    assert "0 at least one training job found" in text and "1 no training job runs" in text and "2 an error" in text

"""What would otherwise fail in silence is said: paths that match nothing (check-config, probe, the
daemon's log and its `path_unmatched` finding), the log engine in use, and `probe` never touching
the daemon's state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import REPO, wait_for


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True,
                          cwd=str(REPO), timeout=60)


def _config(tmp_path: Path, **probes) -> Path:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"paths": {"state_dir": str(tmp_path / "state")}, "probes": probes}))
    return cfg


def test_check_config_warns_about_paths_that_match_nothing(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("x\n")
    cfg = _config(tmp_path,
                  heartbeat={"enabled": True, "paths": [str(tmp_path / "hb" / "rank*.json")]},
                  logs={"enabled": True, "sources": [
                      {"name": "good", "paths": [str(tmp_path / "logs" / "*.log")]},
                      {"name": "typo", "paths": [str(tmp_path / "lgos" / "*.log")]}]})
    res = run_cli("check-config", "-c", str(cfg), "-q")
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, res.stderr
    assert f"probes.heartbeat.paths[0]: '{tmp_path}/hb/rank*.json' matches nothing (folder {tmp_path}/hb does not exist)" in warnings[0]
    assert "probes.logs.sources[1].paths[0] (typo)" in warnings[1] and f"folder {tmp_path}/lgos does not exist" in warnings[1]


def test_probe_reports_unmatched_paths_and_never_writes_the_daemons_state(tmp_path):
    (tmp_path / "logs").mkdir()
    cfg = _config(tmp_path, logs={"enabled": True, "sources": [{"name": "train", "paths": [str(tmp_path / "logs" / "*.log")]}]})
    res = run_cli("probe", "-c", str(cfg), "--json")
    data = json.loads(res.stdout)
    assert data["unmatched_paths"] == [
        f"probes.logs.sources[0].paths[0] (train): '{tmp_path}/logs/*.log' matches nothing (no file matches yet)"]
    assert not (tmp_path / "state").exists(), "probe wrote into the daemon's state folder"


def test_a_line_probe_reads_is_still_alerted_by_the_daemon(make_daemon, tmp_path):
    """The daemon is down (an upgrade), a NaN line arrives, an operator runs `probe`: the daemon,
    back up, must still alert that line (it resumes from its own saved read position)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_text("step 1 loss 2.0\n")
    config = {"probes": {"jitter": "0s", "logs": {"enabled": True, "interval": "1s",
                                                  "sources": [{"name": "train", "paths": [str(logdir / "*.log")]}]}}}
    d = make_daemon(config)
    wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
    wait_for(lambda: (tmp_path / "state" / "log-offsets.json").exists(), what="offsets saved")
    assert d.stop() == 0
    with open(log, "a") as fh:
        fh.write("iteration 5426 | lm loss: nan | grad norm: nan\n")
    res = run_cli("probe", "-c", str(d.config_path))
    assert res.returncode in (0, 1), res.stderr
    d2 = make_daemon(config)
    nan = wait_for(lambda: [f for f in d2.status()["findings"] if f["rule"] == "log_nan"], what="log_nan after restart")
    assert "iteration 5426" in nan[0]["evidence"][-1]


def test_daemon_says_which_log_engine_runs_and_raises_path_unmatched(make_daemon, tmp_path):
    (tmp_path / "logs").mkdir()
    d = make_daemon({"probes": {"jitter": "0s",
                                "process": {"enabled": True, "cmdline": "no-such-trainer-xyz", "start_grace": "2s"},
                                "logs": {"enabled": True, "interval": "1s", "sources": [
                                    {"name": "typo", "paths": [str(tmp_path / "lgos" / "*.log")]}]}}})
    from watchdog.logrules.matcher import effective_engine

    engine = effective_engine("auto")
    assert d.status()["log_engine"] == engine
    assert d.metrics()[f'npu_watchdog_log_engine_info{{engine="{engine}"}}'] == 1
    found = wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "path_unmatched"], what="path_unmatched")
    assert found[0]["labels"]["source"] == "typo" and found[0]["severity"] == "warning"
    log = d.log()
    assert f"config: probes.logs.sources[0].paths[0] (typo): '{tmp_path}/lgos/*.log' matches nothing" in log
    assert ("log rules run on the re2 engine" in log) if engine == "re2" else ("google-re2 is not installed" in log)


def test_doctor_reports_the_log_engine(tmp_path):
    res = run_cli("doctor", "--json")
    data = json.loads(res.stdout)
    check = [c for c in data["checks"] if c["group"] == "daemon" and c["name"] == "log_engine"]
    assert len(check) == 1
    assert check[0]["details"]["engine"] in ("re2", "re")
    assert check[0]["status"] == ("pass" if check[0]["details"]["engine"] == "re2" else "warn")

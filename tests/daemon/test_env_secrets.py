"""A credential given as `${NAME}` outside a Secret field, where NAME says it is one: a command
check's header argument (`curl -H "PRIVATE-TOKEN: ${CHECK_TOKEN}" ...`), which no option name
marks. The config keeps such values as secrets, so neither the page (its hint shows the command
line), /api/status, the alert state, the daemon's log nor `check-config`'s dump shows it."""

from __future__ import annotations

import json

from tests.fakes.receivers import Receiver
from tests.helpers import run_cli, wait_for
import os

ENV_TOKEN = "glpat-EnvT0ken9876543210"


def _files_holding(root, secret):
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def _config(rx_url):
    return {"probes": {"jitter": "0s", "commands": [
                {"name": "api", "argv": ["/bin/sh", "-c", "exit 1", "curl", "-fsS", "-H", "PRIVATE-TOKEN: ${CHECK_TOKEN}",
                                         "https://gitlab.internal/api/v4/version"],
                 "interval": "1s", "timeout": "5s"}]},
            "alerting": {"group_window": "1s", "channels": [{"type": "webhook", "name": "hook", "url": rx_url}]}}


def test_check_config_does_not_print_an_env_value(tmp_path, make_daemon):
    with Receiver("webhook") as rx:
        d = make_daemon(_config(rx.url), env={"CHECK_TOKEN": ENV_TOKEN}, start=False)
        out = run_cli("check-config", "-c", str(d.config_path), env={**os.environ, "CHECK_TOKEN": ENV_TOKEN})
        assert out.returncode == 0, out.stderr
        assert ENV_TOKEN not in out.stdout + out.stderr


def test_a_check_argument_given_as_env_stays_out_of_pages_status_and_state(tmp_path, make_daemon):
    with Receiver("webhook") as rx:
        d = make_daemon(_config(rx.url), env={"CHECK_TOKEN": ENV_TOKEN})
        wait_for(lambda: rx.accepted(), timeout=90, what="the check's page")
        leaks = {"message": ENV_TOKEN in json.dumps([r.json for r in rx.accepted()]),
                 "status": ENV_TOKEN in json.dumps(d.status()), "log": ENV_TOKEN in d.log(),
                 "metrics": ENV_TOKEN in d.metrics_text(), "state": _files_holding(tmp_path / "state", ENV_TOKEN)}
        assert not any(leaks.values()), leaks

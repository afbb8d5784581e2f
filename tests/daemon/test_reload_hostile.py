"""SIGHUP with a hostile config: rejected quickly off the main loop, the running config stays,
/healthz stays truthful, and the next good reload still works."""

from __future__ import annotations

import os
import signal

from tests.helpers import http_get, wait_for
from tests.hostile_configs import BILLION_LAUGHS

BASE = {"probes": {"jitter": "0s", "commands": [
    {"name": "ok", "argv": ["/bin/true"], "interval": "1s", "timeout": "5s"}]}}


def _runs(d) -> int:
    return [p for p in d.status()["probes"] if p["name"] == "command:ok"][0]["runs_total"]


def _reload_counted(d, result: str, n: int) -> None:
    wait_for(lambda: d.metrics()[f'npu_watchdog_config_reloads_total{{result="{result}"}}'] == n,
             timeout=30, what=f"{n} reload(s) with result {result}")


def test_hostile_reloads_are_rejected_and_the_daemon_keeps_watching(make_daemon, tmp_path):
    d = make_daemon(BASE)
    wait_for(lambda: _runs(d) >= 1, what="first round")
    fifo = tmp_path / "url.fifo"
    os.mkfifo(fifo)
    hostile = [
        BILLION_LAUGHS,
        "x: &a [1, *a]\n",
        "alerting:\n  channels:\n    - {type: webhook, name: w, url_file: %s}\n" % fifo,
        "alerting:\n  channels:\n    - {type: webhook, name: w, url_file: /dev/zero}\n",
    ]
    for i, text in enumerate(hostile, start=1):
        d.config_path.write_text(text)
        d.signal(signal.SIGHUP)
        _reload_counted(d, "failure", i)
        code, body = http_get(d.url + "/healthz", timeout=5.0)
        assert code == 200, body
    assert "Traceback" not in d.log()
    runs = _runs(d)
    wait_for(lambda: _runs(d) > runs, what="the running config still probing")
    # The main loop is free: a good config is applied.
    cfg = dict(d.config)
    cfg["probes"] = {"jitter": "0s", "commands": BASE["probes"]["commands"] + [
        {"name": "second", "argv": ["/bin/true"], "interval": "1s", "timeout": "5s"}]}
    d.write_config(cfg)
    d.signal(signal.SIGHUP)
    _reload_counted(d, "success", 1)
    wait_for(lambda: len(d.status()["probes"]) == 2, what="the reloaded probe list")
    assert d.stop() == 0

"""What the running daemon has imported: only what it uses (each unused library is resident memory).

Counted, not timed. The real daemon runs (`npu-watchdog run`, discovery on as shipped, a channel
configured) under a small runner that, when the test asks (a file appears), writes which of some
modules the process has loaded. requests and urllib3 (~5 MB) are needed only to send: a daemon
whose channels have sent nothing must not carry them.
"""

from __future__ import annotations

import json
import uuid
import sys

from tests.helpers import Daemon, free_port, wait_for

RUNNER = r"""
import json, os, runpy, sys, threading, time
ask, out, wanted = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
def answer():
    while not os.path.exists(ask):
        time.sleep(0.05)
    with open(out + ".tmp", "w") as fh:
        json.dump(sorted(m for m in wanted if m in sys.modules), fh)
    os.replace(out + ".tmp", out)
threading.Thread(target=answer, daemon=True).start()
sys.argv = ["npu-watchdog"] + sys.argv[sys.argv.index("-m") + 2:]
runpy.run_module("watchdog", run_name="__main__", alter_sys=True)
"""

#: Loaded only by what uses them.
LAZY = ("requests", "urllib3", "watchdog.alerting.deliver.httpclient")


def loaded_after_rounds(tmp_path, rounds: int = 1):
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    ask, out = tmp_path / "ask", tmp_path / "loaded.json"
    cfg = {
        # Discovery as shipped, kept to jobs carrying this test's own marker: a training job run
        # on the machine by other work must not make it page (and so import requests).
        "discovery": {"enabled": True, "only_env": f"NPU_WATCHDOG_TEST_MARK={uuid.uuid4().hex}"},
        "alerting": {"channels": [{"type": "webhook", "name": "ops",
                                   "url": f"http://127.0.0.1:{free_port()}/hook"}]},
    }
    d = Daemon(tmp_path, cfg, wrapper=(sys.executable, str(runner), str(ask), str(out), ",".join(LAZY)))
    with d:
        wait_for(lambda: d.status() and all(p["runs_total"] >= rounds for p in d.status()["probes"]),
                 timeout=60, what=f"{rounds} rounds of every probe")
        ask.write_text("")
        wait_for(out.exists, timeout=10, what="the runner's answer")
        status = d.status()
        log = d.log()
    return json.loads(out.read_text()), status, log


def test_a_daemon_that_has_sent_nothing_has_not_imported_requests(tmp_path):
    loaded, status, log = loaded_after_rounds(tmp_path)
    assert status["findings"] == [] and status["discovery"]["jobs"] == [], status
    assert loaded == [], (loaded, log[-2000:])


#: Plugin packages the config must not load: the composition root hands their declarations down.
PLUGIN_PACKAGES = ("watchdog.probes", "watchdog.detectors", "watchdog.summaries", "watchdog.metrics",
                   "watchdog.alerting")


def _loaded_by(statement: str) -> list:
    import subprocess

    code = (f"import sys\n{statement}\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m == 'watchdog' or m.startswith('watchdog.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.split()


def test_the_config_schema_loads_no_plugin_module():
    """`import watchdog.config.schema` alone loads no probe, detector, summary, metric or channel
    module (it loaded 79 modules when the config looked the probe modules up itself)."""
    loaded = _loaded_by("import watchdog.config.schema")
    plugins = [m for m in loaded if m.startswith(PLUGIN_PACKAGES)]
    assert plugins == [], plugins
    assert "watchdog.config.schema" in loaded


def test_the_count_sees_plugin_modules_when_the_root_loads():
    """The counter itself: importing the composition root loads every plugin module it lists."""
    loaded = _loaded_by("import watchdog.plugins_list")
    assert {"watchdog.probes.npu", "watchdog.detectors.stall", "watchdog.alerting.deliver.channels.feishu"} <= set(loaded)

"""`npu_watchdog_interruptions_total` on the real daemon: an OOM line that fires counts once in
its (domain, cause), the count is the engine's state (committed with the alerts), so it is still
there after the alert resolved and the daemon restarted, and a new episode adds one."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import Daemon, wait_for

KEY = 'npu_watchdog_interruptions_total{cause="oom_torch_npu",domain="memory"}'
OOM = "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 3; 60.97 GiB total capacity)\n"


def _config(logdir: Path) -> dict:
    return {
        "probes": {"logs": {"enabled": True, "interval": "1s", "hold": "2s",
                            "sources": [{"name": "train", "paths": [str(logdir / "*.log")]}]}},
        "alerting": {"group_window": "0s", "resolve_delay": "1s"},
    }


def _firing(d: Daemon) -> float:
    return sum(v for k, v in d.metrics().items()
               if k.startswith('npu_watchdog_alerts_firing{rule="log_oom"'))


def test_an_interruption_counts_once_and_survives_a_restart(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank3.log"
    log.write_text("")
    d = Daemon(tmp_path, _config(logdir)).start()
    try:
        wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
        assert d.metrics().get(KEY, 0) == 0
        assert d.metrics()['npu_watchdog_interruptions_total{cause="none",domain="memory"}'] == 0
        with open(log, "a") as fh:
            fh.write(OOM)
        wait_for(lambda: d.metrics().get(KEY) == 1, what="the OOM counted")
        wait_for(lambda: _firing(d) == 0, timeout=60, what="the OOM resolved")
        assert d.metrics()[KEY] == 1, "one firing episode counts once, however often it is scraped"
    finally:
        assert d.stop() == 0, d.log()

    again = Daemon(tmp_path, _config(logdir)).start()
    try:
        assert again.metrics().get(KEY) == 1, "the count is kept with the alert state"
        wait_for(lambda: again.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1,
                 what="followed again")
        with open(log, "a") as fh:
            fh.write(OOM)
        wait_for(lambda: again.metrics().get(KEY) == 2, what="a new episode counted")
    finally:
        assert again.stop() == 0, again.log()

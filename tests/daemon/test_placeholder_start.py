"""No install pages a placeholder: the daemon refuses to start while a channel URL (or the dead-man
URL) is still the example's placeholder, with one log line naming the key and what to set (never
the URL); a reload to such a config is refused and the running config stays; `test-alert` says
the URL is a placeholder instead of trying it ("will retry")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import yaml

from tests.fakes.receivers import Receiver
from tests.helpers import REPO, wait_for

SHIPPED = REPO / "config" / "npu-watchdog.example.yaml"
TOKEN = "replace-me"


def _env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("FEISHU_WEBHOOK_URL", "OPS_WEBHOOK_URL")}
    env["PYTHONPATH"] = str(REPO)
    return env


def test_the_shipped_example_unedited_does_not_start(tmp_path):
    """`make install` then `systemctl enable --now`: the unit runs exactly this."""
    r = subprocess.run([sys.executable, "-m", "watchdog", "run", "-c", str(SHIPPED), "--state-dir",
                        str(tmp_path / "state")], capture_output=True, text=True, timeout=120, env=_env(tmp_path),
                       cwd=str(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    lines = [ln for ln in out.splitlines() if "placeholder" in ln]
    assert len(lines) == 1, out
    assert "alerting.channels[0].url (feishu-ops)" in lines[0] and "set the real value" in lines[0]
    assert "open.feishu.cn" not in out and "/hook/" not in out  # the URL itself is a secret
    assert "serving /metrics" not in out


def test_the_same_config_with_the_url_set_starts(make_daemon):
    with Receiver("feishu") as rx:
        d = make_daemon({"alerting": {"channels": [{"type": "feishu", "name": "ops", "url": rx.url}]}})
        assert [v for k, v in d.metrics().items() if k.startswith("npu_watchdog_build_info{")] == [1]


def test_a_reload_to_a_placeholder_url_is_refused(make_daemon):
    with Receiver("webhook") as rx:
        d = make_daemon({"alerting": {"channels": [{"type": "webhook", "name": "hook", "url": rx.url}]}})
        d.config["alerting"]["channels"] = [{"type": "webhook", "name": "hook",
                                             "url": f"https://hooks.example.com/{TOKEN}"}]
        d.write_config(d.config)
        d.signal(signal.SIGHUP)
        wait_for(lambda: d.metrics()['npu_watchdog_config_reloads_total{result="failure"}'] == 1, what="reload refused")
        assert d.metrics()['npu_watchdog_config_reloads_total{result="success"}'] == 0
        wait_for(lambda: "placeholder" in d.log(), what="the refusal logged")
        assert "hooks.example.com" not in d.log()


def test_test_alert_says_the_url_is_a_placeholder(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"alerting": {"channels": [
        {"type": "feishu", "name": "ops", "url": f"https://open.feishu.cn/open-apis/bot/v2/hook/{TOKEN}"}]}}))
    r = subprocess.run([sys.executable, "-m", "watchdog", "test-alert", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=120, env=_env(tmp_path), cwd=str(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "ops (feishu): not sent: the URL is a placeholder" in out and "retry" not in out, out
    assert TOKEN in out and "open.feishu.cn" not in out

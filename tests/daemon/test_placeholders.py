"""`check-config` and `doctor` flag placeholder channel URLs and links (the shipped example's
`.../hook/replace-me`, hosts under the reserved example domains) by key path, without ever
printing the URL (a webhook URL is the credential)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.helpers import REPO, run_cli
from watchdog.config.load import load_config_text
from watchdog.config.placeholders import placeholders, why_placeholder

EXAMPLE = REPO / "config" / "npu-watchdog.example.yaml"
REAL_LOOKING = "https://open.feishu.cn/open-apis/bot/v2/hook/6f1c0d2e-5b7a-4c1e-9a53-0f2b8d7e4a11"


@pytest.mark.parametrize("url,found", [
    ("https://open.feishu.cn/open-apis/bot/v2/hook/replace-me", "replace-me"),
    ("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=YOUR_KEY", "YOUR_KEY"),
    ("https://oapi.dingtalk.com/robot/send?access_token=<token>", "<...>"),
    ("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXX", "XXXXXXXXXXXX"),
    ("http://alertmanager.example.com:9093", "example.com"),
    ("https://npu-watchdog.example/docs/runbook.md", "'example'"),
    ("https://hook.invalid/x", "invalid"),
])
def test_placeholders_are_recognised(url, found):
    why = why_placeholder(url)
    assert why and found in why, why


@pytest.mark.parametrize("url", [REAL_LOOKING, "http://127.0.0.1:9095/hook",
                                 "https://hooks.slack.com/services/T0A1B2C3/B0D4E5F6/q8W7e6R5t4Y3u2I1o0P9a8S7",
                                 "http://grafana.internal:3000/d/npu-watchdog/npu-watchdog?var-host={host}",
                                 "https://examples.internal.corp/hook/abc"])
def test_real_urls_are_not_flagged(url):
    assert why_placeholder(url) is None


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_WEBHOOK_URL")}
    return {**env, **extra}


def test_check_config_warns_with_the_key_path_and_never_the_url():
    res = run_cli("check-config", "-q", "-c", str(EXAMPLE), env=_env())
    assert res.returncode == 0, res.stderr
    assert "warning: alerting.channels[0].url (feishu-ops): its path or query holds the placeholder 'replace-me'" \
        in res.stderr, res.stderr
    assert "open.feishu.cn" not in res.stderr and "hook/" not in res.stderr
    fixed = run_cli("check-config", "-q", "-c", str(EXAMPLE), env=_env(FEISHU_WEBHOOK_URL=REAL_LOOKING))
    assert "placeholder" not in fixed.stderr and "6f1c0d2e" not in fixed.stderr, fixed.stderr


def test_doctor_fails_a_placeholder_channel_and_warns_a_placeholder_link(tmp_path):
    doc = yaml.safe_load(EXAMPLE.read_text().replace("${FEISHU_WEBHOOK_URL:-", "").replace("replace-me}", "replace-me"))
    doc["alerting"]["dashboard_url"] = "https://grafana.example.com/d/npu-watchdog/x?var-host={host}"
    doc["paths"] = {"state_dir": str(tmp_path / "state")}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    res = run_cli("doctor", "--json", "-c", str(cfg), env=_env(), timeout=120)
    report = json.loads(res.stdout)
    found = {c["details"]["key"]: c["status"] for c in report["checks"] if c["name"] == "placeholder_url"}
    assert found == {"alerting.channels[0].url (feishu-ops)": "fail", "alerting.dashboard_url": "warn"}, found
    assert res.returncode == 2
    assert "hook/replace-me" not in res.stdout and "open-apis" not in res.stdout


def test_the_deadman_url_is_checked_too():
    cfg = load_config_text(yaml.safe_dump({"alerting": {"deadman_url": "https://hc-ping.example.com/uuid"}}))
    assert [p.path for p in placeholders(cfg)] == ["alerting.deadman_url"]


def test_doctor_says_where_runbook_links_point(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"http": {"listen": "10.0.0.7:19841"}, "paths": {"state_dir": str(tmp_path)}}))
    report = json.loads(run_cli("doctor", "--json", "-c", str(cfg), timeout=120).stdout)
    [c] = [c for c in report["checks"] if c["name"] == "runbook_links"]
    assert c["status"] == "pass" and "http://10.0.0.7:19841/runbook/en (served by this daemon)" in c["reason"]
    cfg.write_text(yaml.safe_dump({"http": {"listen": "127.0.0.1:19841"}, "paths": {"state_dir": str(tmp_path)}}))
    report = json.loads(run_cli("doctor", "--json", "-c", str(cfg), timeout=120).stdout)
    [c] = [c for c in report["checks"] if c["name"] == "runbook_links"]
    assert c["status"] == "warn" and "only on this node" in c["reason"]
    cfg.write_text(yaml.safe_dump({"http": {"enabled": False}, "paths": {"state_dir": str(tmp_path)}}))
    report = json.loads(run_cli("doctor", "--json", "-c", str(cfg), timeout=120).stdout)
    [c] = [c for c in report["checks"] if c["name"] == "runbook_links"]
    assert c["status"] == "warn"

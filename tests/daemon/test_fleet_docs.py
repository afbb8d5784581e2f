"""The fleet guide's examples (docs/fleet.md) are valid configs: the Prometheus scrape config (with the shipped
rules) passes `promtool check config`, the Alertmanager routing passes `amtool check-config`."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.helpers import REPO

RULES = REPO / "contrib" / "prometheus" / "npu-watchdog.rules.yml"


def fleet_yaml_blocks() -> list:
    section = (REPO / "docs" / "fleet.md").read_text()
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def test_section_has_the_two_examples():
    blocks = fleet_yaml_blocks()
    assert len(blocks) == 2  # the fleet-mode snippets are ```text: validated below
    assert "scrape_configs:" in blocks[0] and "job_name: npu-watchdog" in blocks[0]
    assert "honor_labels: false" in blocks[0]
    assert "receivers:" in blocks[1]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian package `prometheus`)")
def test_scrape_config_example_is_valid(tmp_path):
    (tmp_path / "targets.json").write_text('[{"targets": ["node-01:9841"]}]')
    text = fleet_yaml_blocks()[0]
    text = text.replace("/etc/prometheus/rules/npu-watchdog.rules.yml", str(RULES))
    text = text.replace("/etc/prometheus/targets/npu-watchdog.json", str(tmp_path / "targets.json"))
    (tmp_path / "prometheus.yml").write_text(text)
    r = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 rule files found" in r.stdout


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool is not installed (Debian package `prometheus-alertmanager`)")
def test_alertmanager_example_is_valid(tmp_path):
    (tmp_path / "slack.url").write_text("https://hooks.slack.com/services/T0/B0/x\n")
    text = fleet_yaml_blocks()[1].replace("/etc/alertmanager/slack.url", str(tmp_path / "slack.url"))
    (tmp_path / "alertmanager.yml").write_text(text)
    r = subprocess.run(["amtool", "check-config", str(tmp_path / "alertmanager.yml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def text_blocks() -> list:
    return re.findall(r"```text\n(.*?)```", (REPO / "docs" / "fleet.md").read_text(), re.S)


def test_fleet_mode_examples_are_valid_configs(tmp_path):
    """The fleet-mode switch and the relay config of the guide load as they are."""
    import yaml

    from watchdog.config import load_config_text
    from watchdog.relay.config import load_relay_config

    node, relay = text_blocks()[:2]
    cfg = load_config_text(node)
    assert cfg.alerting.mode == "fleet" and [c.type for c in cfg.alerting.channels] == ["alertmanager"] * 2
    for name in ("relay.token", "feishu.url", "feishu.secret"):
        (tmp_path / name).write_text("https://open.feishu.cn/x\n" if name == "feishu.url" else "s3\n")
    text = relay.replace("/etc/npu-watchdog/", f"{tmp_path}/")
    (tmp_path / "relay.yaml").write_text(text)
    rc = load_relay_config(str(tmp_path / "relay.yaml"))
    assert rc.alerting.channels[0].type == "feishu" and rc.port == 9842
    assert yaml.safe_load(text)["resolved_grace"] == "10m"

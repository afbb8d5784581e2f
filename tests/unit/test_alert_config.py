"""The alerting config section: clear errors, secrets redacted, defaults that make sense."""

from __future__ import annotations

import pytest
import yaml

from watchdog.config.load import ConfigError, load_config_text, redacted_dump


def load(alerting):
    return load_config_text(yaml.safe_dump({"alerting": alerting}))


def test_errors_name_the_key_and_never_echo_the_url():
    with pytest.raises(ConfigError) as e:
        load({"channels": [{"type": "slack", "name": "a", "url": "http://h/tok-123456", "secret": "x"},
                           {"type": "pager", "name": "b", "url": "http://h/x"}]})
    text = "\n".join(e.value.errors)
    assert "alerting.channels[0]: channel a: `secret` does not apply to a slack channel" in text
    assert "alerting.channels[1].type" in text
    assert "tok-123456" not in text
    with pytest.raises(ConfigError) as e:
        load({"channels": [{"type": "slack", "name": "a", "url": "http://h/1"},
                           {"type": "slack", "name": "a", "url": "http://h/2"}]})
    assert "duplicate name 'a'" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load({"channels": [{"type": "slack", "name": "a", "url": "http://h/1", "matchers": ["rule=~("]}]})
    assert "bad regular expression" in str(e.value)


def test_defaults_and_redaction():
    cfg = load({"for": {"stall": "10s"}, "deadman_url": "http://h/dead-123",
                "channels": [{"type": "feishu", "name": "f", "url": "http://h/hook-123", "secret": "s-123"}]})
    al = cfg.alerting
    assert al.group_window == 2 and al.reminder == 4 * 3600 and al.send_resolved is True
    assert al.for_rule("stall") == 10 and al.for_rule("npu_temperature") == 120 and al.for_rule("x") == 0
    assert al.channels[0].limits() == [(5, 1.0), (100, 60.0)]
    assert any("npu_missing" in r.source and "stall" in r.target for r in al.inhibitions)
    dump = yaml.safe_dump(redacted_dump(cfg))
    for s in ("hook-123", "s-123", "dead-123"):
        assert s not in dump


@pytest.mark.parametrize("kind, key, value, owners", [
    ("feishu", "bearer_token", "t-1", "alertmanager, webhook"),
    ("slack", "secret", "s-1", "dingtalk, feishu"),
    ("webhook", "resend_interval", "1m", "alertmanager"),
    ("alertmanager", "mentions", {"critical": ["all"]}, "dingtalk, feishu, slack, wecom"),
    ("wecom", "headers", {"X-A": "b"}, "alertmanager, webhook"),
])
def test_a_key_of_another_vendor_names_the_channel_the_key_and_the_vendor(kind, key, value, owners):
    with pytest.raises(ConfigError) as e:
        load({"channels": [{"type": kind, "name": "ops", "url": "http://h/tok-123456", key: value}]})
    text = "\n".join(e.value.errors)
    assert text == (f"alerting.channels[0]: channel ops: `{key}` does not apply to a {kind} channel "
                    f"(it is a key of {owners} channels)")
    assert "tok-123456" not in text


def test_a_key_of_no_vendor_lists_the_vendors_keys():
    with pytest.raises(ConfigError) as e:
        load({"channels": [{"type": "webhook", "name": "ops", "url": "http://h/x", "retries": 3}]})
    text = "\n".join(e.value.errors)
    assert text.startswith("alerting.channels[0]: channel ops: unknown key `retries` for a webhook channel (its keys: ")
    assert "bearer_token" in text and "mentions" not in text


def test_each_channel_is_its_vendors_model_and_keeps_its_own_keys():
    cfg = load({"channels": [
        {"type": "feishu", "name": "f", "url": "http://h/1", "secret": "s", "mentions": {"critical": ["all"]}},
        {"type": "webhook", "name": "w", "url": "http://h/2", "bearer_token": "b", "headers": {"X-A": "c"}},
        {"type": "alertmanager", "name": "am", "url": "http://h:9093", "resend_interval": "10s", "alert_ttl": "1m"}]})
    feishu, webhook, am = cfg.alerting.channels
    assert [type(c).__name__ for c in cfg.alerting.channels] == ["FeishuConfig", "WebhookConfig", "AlertmanagerConfig"]
    assert feishu.mentions == {"critical": ["all"]} and feishu.secret.get_secret_value() == "s"
    assert webhook.headers["X-A"].get_secret_value() == "c" and not hasattr(webhook, "resend_interval")
    assert (am.resend_interval, am.alert_ttl) == (10, 60) and am.fleet_sink and not webhook.fleet_sink
    dump = yaml.safe_dump(redacted_dump(cfg))
    assert "resend_interval: 10.0" in dump and "s-1" not in dump and "mentions" in dump

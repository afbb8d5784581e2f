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
    assert "alerting.channels[0]" in text and "signing" in text
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

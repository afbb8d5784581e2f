"""Plugin lists are derived from declarations in each module: nothing to keep in sync by hand."""

from __future__ import annotations

import pkgutil

import pytest

import watchdog.detectors as detectors_pkg
import watchdog.probes as probes_pkg
from watchdog.alerting.deliver.channels import CHANNEL_CLASSES
from watchdog.config.load import ConfigError, load_config_text


def test_every_probe_module_with_build_is_scheduled_in_order():
    names = probes_pkg.probe_modules()
    with_build = {f"watchdog.probes.{m.name}" for m in pkgutil.iter_modules(probes_pkg.__path__)
                  if hasattr(__import__(f"watchdog.probes.{m.name}", fromlist=["x"]), "build")}
    assert set(names) == with_build
    orders = [__import__(n, fromlist=["x"]).ORDER for n in names]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert names[0] == "watchdog.probes.process"


def test_every_detector_module_is_loaded():
    loaded = dict(detectors_pkg.load_detectors())
    assert {"core", "liveness", "logs", "npu", "npu_smi", "stall"} <= set(loaded)
    assert "series" not in loaded  # a helper module without `detect` is no detector


def test_channel_registry_comes_from_the_channel_modules():
    assert set(CHANNEL_CLASSES) == {"feishu", "slack", "dingtalk", "wecom", "webhook", "alertmanager"}
    for kind, cls in CHANNEL_CLASSES.items():
        assert cls.type == kind
        assert cls.config_model.model_fields["type"].default == kind
        assert all(count >= 1 and per > 0 for count, per in cls.config_model.vendor_limits)
    assert CHANNEL_CLASSES["feishu"].config_model.vendor_limits == ((5, 1.0), (100, 60.0))
    assert {k for k, c in CHANNEL_CLASSES.items() if "secret" in c.config_model.model_fields} == {"feishu", "dingtalk"}


def test_config_accepts_exactly_the_registered_channel_types():
    for kind in CHANNEL_CLASSES:
        cfg = load_config_text(f"alerting:\n  channels:\n    - {{type: {kind}, name: c1, url: 'http://127.0.0.1:1/x'}}\n")
        assert cfg.alerting.channels[0].limits() == list(CHANNEL_CLASSES[kind].config_model.vendor_limits)
        assert type(cfg.alerting.channels[0]) is CHANNEL_CLASSES[kind].config_model
    with pytest.raises(ConfigError) as e:
        load_config_text("alerting:\n  channels:\n    - {type: teams, name: c1, url: 'http://127.0.0.1:1/x'}\n")
    assert "alerting.channels[0].type" in str(e.value) and "feishu" in str(e.value)

"""Delivery channels, one module per vendor; `build_channel(cfg, alerting)` picks the class."""

from __future__ import annotations

from typing import Dict

from watchdog.alerting.channels.base import Channel, Verdict, scrub
from watchdog.alerting.channels.dingtalk import DingTalkChannel
from watchdog.alerting.channels.feishu import FeishuChannel
from watchdog.alerting.channels.slack import SlackChannel
from watchdog.alerting.channels.webhook import AlertmanagerChannel, WebhookChannel
from watchdog.alerting.channels.wecom import WeComChannel
from watchdog.config.sections.alerting import AlertingConfig, ChannelConfig

CHANNEL_CLASSES = {
    "feishu": FeishuChannel,
    "slack": SlackChannel,
    "dingtalk": DingTalkChannel,
    "wecom": WeComChannel,
    "webhook": WebhookChannel,
    "alertmanager": AlertmanagerChannel,
}


def build_channel(cfg: ChannelConfig, alerting: AlertingConfig) -> Channel:
    return CHANNEL_CLASSES[cfg.type](cfg, alerting)


def build_channels(alerting: AlertingConfig) -> Dict[str, Channel]:
    return {c.name: build_channel(c, alerting) for c in alerting.channels}


__all__ = ["Channel", "Verdict", "scrub", "build_channel", "build_channels", "CHANNEL_CLASSES"]

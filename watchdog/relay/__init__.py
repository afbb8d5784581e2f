"""`npu-watchdog relay`: Alertmanager's webhook in, one signed Feishu card (or Slack message) per
training-job incident out, through the same channel code and durable outbox as a node daemon.

Alertmanager has no Feishu receiver, and its generic webhook payload is not what a Feishu bot
accepts; the relay fills that gap so a fleet gets the same cards as a single node.
"""

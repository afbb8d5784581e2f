"""Compatibility name: the HuggingFace callback now lives in `npu_watchdog_heartbeat.hf`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from npu_watchdog_heartbeat.hf import WatchdogCallback, WatchdogHeartbeatCallback  # noqa: E402

__all__ = ["WatchdogCallback", "WatchdogHeartbeatCallback"]

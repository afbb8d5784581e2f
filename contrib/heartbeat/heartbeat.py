"""Compatibility name for scripts that put this folder on `sys.path` and `import heartbeat`.

The helper is now the installable package `npu_watchdog_heartbeat` in this folder
(`pip install ./contrib/heartbeat`); this module only re-exports it.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from npu_watchdog_heartbeat import PHASES, Heartbeat  # noqa: E402

__all__ = ["Heartbeat", "PHASES"]

"""Config of the alert engine and its channels (filled in by the alerting feature)."""

from __future__ import annotations

from watchdog.config.types import StrictModel


class AlertingConfig(StrictModel):
    """Until channels are configured, findings are only logged when they change state."""

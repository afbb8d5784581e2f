"""Alerting: the engine that turns findings into notifications."""

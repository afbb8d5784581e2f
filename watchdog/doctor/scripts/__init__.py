"""Standalone scripts run inside the training interpreter (not imported by the daemon)."""

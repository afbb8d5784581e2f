"""The HTTP endpoint of the daemon (`/metrics`, `/healthz`, `/api/status`, the runbook).
"""

"""The outbox's log line for a vendor's Retry-After beyond the cap (watchdog.alerting.deliver.outbox)."""

from __future__ import annotations

from watchdog.alerting.deliver.outbox import _capped
from watchdog.config.sections.alerting import AlertingConfig


def test_an_absurd_retry_after_is_said_in_words_in_the_log_line():
    """`Retry-After: 1e300` or `inf` is capped (vendor_delay); the log line must not print "infs"
    or a 29-digit number of seconds."""
    cfg = AlertingConfig()
    assert _capped(cfg, float("inf")) == " (the vendor asked for more than 100 days; capped by alerting.retry_max)"
    assert "more than 100 days" in _capped(cfg, 1e28)
    assert _capped(cfg, 3600.0) == " (the vendor asked for 3600s; capped by alerting.retry_max)"
    assert _capped(cfg, 1.0) == ""

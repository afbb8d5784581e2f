"""A page a channel drops reaches on-call through the other channels: one receiver rejects every
message (HTTP 404, as a revoked Slack or webhook URL answers), the other accepts. The fault's page
and its resolution each reach the good channel once; the drops raise one `notifications_failing`
(critical: a critical page was among them) naming the bad channel and the dropped rules, sent to
the good channel once and resolved once `alerting.dropped_hold` after the last drop. The bad
channel is tried with every message and counted (`result="failed"`); the rule's own message,
dropped there too, does not keep it up."""

from __future__ import annotations

import time

from tests.fakes.receivers import Answer, Receiver
from tests.helpers import wait_for

CHECK = """#!/bin/sh
[ -e "$0.ok" ] && exit 0
echo "disk check failed"
exit 1
"""


def _by_rule(rx: Receiver, status: str):
    out = {}
    for r in rx.accepted():
        if r.json["status"] != status:
            continue
        for a in r.json["alerts"]:
            out.setdefault(a["labels"]["alertname"], []).append(a)
    return out


def test_a_channel_that_rejects_a_page_is_reported_through_the_other_once(tmp_path, make_daemon):
    with Receiver("webhook") as good, Receiver("webhook", path="/revoked") as bad:
        bad.script(*[Answer(404, {"error": "no_such_hook"})] * 50)
        script = tmp_path / "check.sh"
        script.write_text(CHECK)
        script.chmod(0o755)
        d = make_daemon({
            "probes": {"jitter": "0s", "commands": [
                {"name": "disk", "argv": [str(script)], "interval": "1s", "timeout": "5s", "severity": "critical"}]},
            "alerting": {"group_window": "1s", "resolve_delay": "1s", "dropped_hold": "20s",
                         "channels": [{"type": "webhook", "name": "ops", "url": good.url},
                                      {"type": "webhook", "name": "revoked", "url": bad.url}]}})
        wait_for(lambda: "notifications_failing" in _by_rule(good, "firing"), timeout=90, what="the drop's alert")
        (check_page,) = _by_rule(good, "firing")["command_check"]
        (dropped,) = _by_rule(good, "firing")["notifications_failing"]
        assert dropped["labels"]["channel"] == "revoked" and dropped["labels"]["severity"] == "critical", dropped
        assert "HTTP 404" in dropped["annotations"]["summary"], dropped["annotations"]
        (line,) = dropped["annotations"]["log_lines"].splitlines()  # one evidence line per drop
        assert "firing critical command_check: rejected: HTTP 404" in line, line
        assert check_page["labels"]["check"] == "disk"
        (script.parent / (script.name + ".ok")).touch()
        wait_for(lambda: "command_check" in _by_rule(good, "resolved"), timeout=60, what="the check's resolution")
        # The resolution was dropped by the bad channel too: the alert holds 20 s after that drop.
        wait_for(lambda: "notifications_failing" in _by_rule(good, "resolved"), timeout=90,
                 what="the drop's alert resolving dropped_hold after the last drop")
        time.sleep(4)  # a second firing or resolution would come within a few ticks
        firing, resolved = _by_rule(good, "firing"), _by_rule(good, "resolved")
        assert {k: len(v) for k, v in firing.items()} == {"command_check": 1, "notifications_failing": 1}, firing
        assert {k: len(v) for k, v in resolved.items()} == {"command_check": 1, "notifications_failing": 1}, resolved
        tried = [r for r in bad.requests if r.status == 404]
        rules = sorted(a["labels"]["alertname"] for r in tried for a in r.json["alerts"])
        assert rules == ["command_check", "command_check", "notifications_failing", "notifications_failing"], rules
        assert d.metrics().get('npu_watchdog_notifications_total{channel="revoked",result="failed"}') == 4


def test_a_page_queued_for_a_channel_renamed_by_reload_reaches_the_new_one_as_evidence(tmp_path, make_daemon):
    """The page waits for a channel whose URL is wrong; on-call fixes the URL and renames the
    channel in one edit and reloads. The queued page is dropped with the old name; before, the
    renamed channel got only the RESOLVED, so the incident was never paged anywhere. Now the drop
    raises notifications_failing for the old name, through the renamed channel, naming the page."""
    import signal

    from tests.fakes.receivers import closed_port

    with Receiver("webhook") as rx:
        script = tmp_path / "check.sh"
        script.write_text(CHECK)
        script.chmod(0o755)
        wrong = {"type": "webhook", "name": "oncall", "url": f"http://127.0.0.1:{closed_port()}/hook"}
        d = make_daemon({
            "probes": {"jitter": "0s", "commands": [
                {"name": "disk", "argv": [str(script)], "interval": "1s", "timeout": "5s", "severity": "critical"}]},
            "alerting": {"group_window": "1s", "resolve_delay": "1s", "max_age": "1h", "retry_initial": "500ms",
                         "channels": [wrong]}})
        wait_for(lambda: "attempt 1 of notification" in d.log(), timeout=90, what="the page failing on the wrong URL")
        cfg = dict(d.config)
        cfg["alerting"] = dict(cfg["alerting"], channels=[dict(wrong, name="oncall-fixed", url=rx.url)])
        d.write_config(cfg)
        d.signal(signal.SIGHUP)
        wait_for(lambda: "notifications_failing" in _by_rule(rx, "firing"), timeout=60, what="the dropped page's alert")
        (dropped,) = _by_rule(rx, "firing")["notifications_failing"]
        assert dropped["labels"]["channel"] == "oncall" and dropped["labels"]["severity"] == "critical", dropped
        (line,) = dropped["annotations"]["log_lines"].splitlines()
        assert "firing critical command_check: channel removed" in line, line
        assert "removed from the config" in dropped["annotations"]["summary"]
        assert "dropped 1 notification(s) for channel oncall" in d.log()

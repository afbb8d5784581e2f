"""A command check's output and a kernel record are redacted at their probe, as log lines are:
a check that prints the webhook URL it failed to reach (and takes `--token VALUE`) pages once,
resolves once, and its words reach the message with the secrets taken out; nothing the daemon
keeps or shows (message bodies, `/api/status`, `/metrics`, its log, its state folder) holds them."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from watchdog.config.schema import Config
from watchdog.privacy.redact import REDACTED, config_secrets
from watchdog.probes.kernel import KernelProbe
from watchdog.host.procstat import boot_time

URL_TOKEN = "T0kenInTheHookPath9876543210"
ARG_TOKEN = "argTok-Q1w2E3r4T5y6"
PASSWORD = "pw-Z9y8X7w6V5u4"

CHECK = """#!/bin/sh
[ -e "$0.ok" ] && exit 0
echo "posting to $HOOK failed: connection refused"
echo "retrying with --token $2 password=%s" >&2
exit 1
""" % PASSWORD


def _messages(rx: Receiver, status: str):
    return [r.json for r in rx.accepted() if r.json["status"] == status]


def _files_holding(root: Path, secrets) -> list:
    return [str(p) for p in root.rglob("*") if p.is_file() and any(s.encode() in p.read_bytes() for s in secrets)]


def test_a_check_printing_the_webhook_url_pages_and_resolves_once_without_it(tmp_path, make_daemon):
    secrets = (URL_TOKEN, ARG_TOKEN, PASSWORD)
    with Receiver("webhook", path="/hook/" + URL_TOKEN) as rx:
        script = tmp_path / "check.sh"
        script.write_text(CHECK.replace("$HOOK", rx.url))
        script.chmod(0o755)
        d = make_daemon({
            "probes": {"jitter": "0s", "commands": [
                {"name": "reach", "argv": [str(script), "--token", ARG_TOKEN], "interval": "1s", "timeout": "5s"}]},
            "alerting": {"group_window": "1s", "resolve_delay": "1s",
                         "channels": [{"type": "webhook", "name": "hook", "url": rx.url}]}})
        wait_for(lambda: _messages(rx, "firing"), timeout=90, what="the check's page")
        status = json.dumps(d.status())
        Path(str(script) + ".ok").touch()
        wait_for(lambda: _messages(rx, "resolved"), timeout=60, what="the check's resolution")
        time.sleep(3)  # a second page or resolution would come within a few rounds
        firing, resolved = _messages(rx, "firing"), _messages(rx, "resolved")
        assert len(firing) == 1 and len(resolved) == 1, (len(firing), len(resolved))
        (alert,) = firing[0]["alerts"]
        assert alert["labels"]["alertname"] == "command_check" and alert["labels"]["check"] == "reach"
        words = alert["annotations"]["log_lines"]
        assert "posting to" in words and "connection refused" in words and REDACTED in words
        assert f"--token {REDACTED}" in alert["annotations"]["hint"]
        sent = json.dumps([r.json for r in rx.accepted()])
        for s in secrets:
            assert s not in sent and s not in status
            assert s not in d.metrics_text() and s not in d.log()
        assert _files_holding(tmp_path / "state", secrets) == []


def test_a_kernel_record_quoting_a_configured_url_is_redacted(tmp_path):
    """The kernel cannot be made to print a URL on a shared machine without writing to its log:
    the read is handed a stand-in answering with a real record's format."""
    config = Config.model_validate({
        "probes": {"kernel": {"enabled": True, "device": "/dev/null"}},
        "alerting": {"channels": [{"type": "webhook", "name": "h", "url": f"https://hooks.example/x/{URL_TOKEN}"}]}})
    p = KernelProbe(config.probes.kernel, str(tmp_path), secrets=config_secrets(config))
    usec = int((time.time() - boot_time()) * 1e6)
    answers = [b"6,21,%d,-;python3[9]: segfault at 0 ip 0 sp 0 error 4 in libhook.so (https://hooks.example/x/%s)\n"
               % (usec, URL_TOKEN.encode())]

    def read(fd, n):
        if not answers:
            raise BlockingIOError()
        return answers.pop(0)

    p._read = read
    (ev,) = p.collect().value.events
    assert ev.rule == "kernel_segfault" and ev.pid == 9
    assert URL_TOKEN not in ev.text and REDACTED in ev.text and "segfault at 0" in ev.text
    # A reload's new secrets are the kept probe's too.
    newer = KernelProbe(config.probes.kernel, str(tmp_path / "n"), secrets=["another-secret-value"])
    assert p.reconfigure(newer) and p.redactor is newer.redactor

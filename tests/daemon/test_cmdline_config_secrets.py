"""The config's own webhook URL on a rank's or a launcher's command line (a trainer posting its
own notices to the same hook, `--notify-url <the channel's URL>`): no option name marks it, so
the command-line redaction alone kept it; the config's secrets are taken out too, for the process
probe's ranks and for discovery's launchers and ranks (status, findings, the alert state)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.jobkit import TrainJob

URL_TOKEN = "T0kenInTheHookPath9876543210"


def _files_holding(root, secrets):
    return [str(p) for p in root.rglob("*") if p.is_file() and any(s.encode() in p.read_bytes() for s in secrets)]


def test_a_rank_command_line_holding_the_channel_url(tmp_path, make_daemon):
    marker = f"argv-{uuid.uuid4().hex[:8]}"
    with Receiver("webhook", path="/hook/" + URL_TOKEN) as rx:
        job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker,
                                "--notify-url", rx.url])
        try:
            d = make_daemon({
                "probes": {"jitter": "0s", "process": {"enabled": True, "interval": "0.5s", "cmdline": marker,
                                                       "stopped_after": "1s"}},
                "alerting": {"group_window": "1s", "channels": [{"type": "webhook", "name": "hook", "url": rx.url}]}})
            os.kill(job.pid, signal.SIGSTOP)
            wait_for(lambda: rx.accepted(), timeout=90, what="the page")
            status = json.dumps(d.status())
            sent = json.dumps([r.json for r in rx.accepted()])
            assert marker in status
            leaks = {"status": URL_TOKEN in status, "message": URL_TOKEN in sent,
                     "metrics": URL_TOKEN in d.metrics_text(), "log": URL_TOKEN in d.log(),
                     "state": _files_holding(tmp_path / "state", [URL_TOKEN])}
            assert not any(leaks.values()), leaks
        finally:
            job.kill()
            job.wait()


def config(job: TrainJob, hook: str) -> dict:
    """Discovery of this test's own job only (its ranks carry `only_env`), a webhook channel."""
    return {"job": {}, "discovery": {"enabled": True, "only_env": job.only_env, "forget_after": "4s", "interval": "1s",
                                     "end_window": "2s", "feed": ["process", "logs", "heartbeat"]},
            "probes": {"process": {"interval": "1s"}, "logs": {"interval": "1s"}, "heartbeat": {"interval": "1s"}},
            "alerting": {"group_window": "300ms", "resolve_delay": "1s", "retry_initial": "300ms", "retry_max": "1s",
                         "channels": [{"type": "webhook", "name": "hook", "url": hook}]}}

URL_TOKEN = "T0kenInTheHookPath9876543210"


class NotifyingJob(TrainJob):
    def __init__(self, *a, notify: str, **kw):
        super().__init__(*a, **kw)
        self.notify = notify

    def argv(self):
        return super().argv() + ["--notify-url", self.notify]




def test_a_discovered_command_line_holding_the_channel_url(tmp_path, make_daemon):
    with Receiver("webhook", path="/hook/" + URL_TOKEN) as rx:
        job = NotifyingJob(tmp_path / "a", ranks=2, env={"NPU_WATCHDOG_JOB": "llama-a"}, notify=rx.url).start()
        try:
            d = make_daemon(config(job, rx.url))
            wait_for(lambda: d.status()["discovery"]["jobs"], timeout=60, what="the job discovered")
            job.exit_rank(1)  # a rank gone: a page that names the ranks (and their records)
            wait_for(lambda: rx.accepted(), timeout=60, what="a page")
            status = json.dumps(d.status())
            where = [k for k in ("discovery", "findings", "alerts") if URL_TOKEN in json.dumps(d.status().get(k))]
            leaks = {"status": where, "message": URL_TOKEN in json.dumps([r.json for r in rx.accepted()]),
                     "log": URL_TOKEN in d.log(), "metrics": URL_TOKEN in d.metrics_text(),
                     "state": _files_holding(tmp_path / "state", [URL_TOKEN])}
            assert URL_TOKEN not in status and not any(leaks.values()), leaks
        finally:
            job.finish()
            if job.proc is not None:
                job.proc.kill()
                job.proc.wait()

"""The real daemon delivering alerts to local vendor look-alikes: crash safety, no re-paging,
silences from the CLI, test-alert, dead-man pings, and no secret anywhere the daemon writes."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.fakes.receivers import Receiver, closed_port
from tests.helpers import REPO, free_port, http_get, wait_for
from tests.message_kit import chat_text

CHAT = ("feishu", "slack", "dingtalk", "wecom")
FENCED = re.compile(r"^(`{3,})\n(.*?)\n\1$", re.M | re.S)

FIRING = 'npu_watchdog_alerts_firing{rule="command_check",severity="warning",training_job="job-t"}'


def check(flag: Path, out: Path = None) -> dict:
    """A command check that fails (printing `out`) while `flag` exists."""
    script = f"if [ -e '{flag}' ]; then " + (f"cat '{out}'; " if out else "") + "exit 1; fi"
    return {"name": "flag", "argv": ["/bin/sh", "-c", script], "interval": "1s", "timeout": "5s"}


def alerting(channels, **extra):
    al = {"group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms", "retry_max": "1s",
          "channels": channels}
    al.update(extra)
    return al


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True,
                          cwd=str(REPO), env=env, timeout=60)


def statuses(rx):
    return [(r.json["status"], r.json.get("kind")) for r in rx.accepted()]


def test_sigkill_with_pending_outbox_then_restart_delivers_once(tmp_path, make_daemon):
    flag = tmp_path / "flag"
    flag.touch()
    port = free_port()  # nothing listens yet: connection refused
    cfg = {"probes": {"commands": [check(flag)]},
           "alerting": alerting([{"type": "webhook", "name": "hook", "url": f"http://127.0.0.1:{port}/hook"}])}
    d = make_daemon(cfg)
    wait_for(lambda: d.metrics().get('npu_watchdog_notifications_total{channel="hook",result="retried"}', 0) >= 1,
             what="a failed delivery attempt")
    assert d.metrics()["npu_watchdog_outbox_pending"] >= 1
    d.kill9()
    with Receiver("webhook", port=port) as rx:
        d2 = make_daemon(cfg)
        rx.wait_for(1)
        wait_for(lambda: d2.metrics()["npu_watchdog_outbox_pending"] == 0, what="outbox drained")
        flag.unlink()
        rx.wait_for(2)
        assert statuses(rx) == [("firing", "firing"), ("resolved", "resolved")]
        wait_for(lambda: d2.metrics()[FIRING] == 0, timeout=10, what="no alert firing")


def test_restart_mid_alert_does_not_repage_and_silences_work_from_the_cli(tmp_path, make_daemon):
    flag = tmp_path / "flag"
    with Receiver("webhook") as rx:
        cfg = {"probes": {"commands": [check(flag)]},
               "alerting": alerting([{"type": "webhook", "name": "hook", "url": rx.url}])}
        d = make_daemon(cfg)
        m = d.metrics()
        assert m[FIRING] == 0 and m['npu_watchdog_notifications_total{channel="hook",result="sent"}'] == 0
        assert m["npu_watchdog_silences_active"] == 0 and m["npu_watchdog_outbox_pending"] == 0
        # A silence added by the CLI while the daemon runs mutes the alert...
        out = run_cli("silence", "add", "-c", str(d.config_path), "--match", "rule=command_check",
                      "--match", "training_job=job-t", "--for", "1h", "--comment", "disk swap")
        assert out.returncode == 0, out.stderr
        sid = out.stdout.split()[1]
        wait_for(lambda: d.metrics()["npu_watchdog_silences_active"] == 1, what="silence picked up")
        assert sid in run_cli("silence", "list", "-c", str(d.config_path)).stdout
        flag.touch()
        wait_for(lambda: d.metrics()['npu_watchdog_alerts_muted{reason="silenced"}'] == 1, what="muted alert")
        assert rx.requests == []
        # ... and removing it sends what still fires at once.
        assert run_cli("silence", "remove", "-c", str(d.config_path), sid).returncode == 0
        rx.wait_for(1)
        d.stop()
        d2 = make_daemon(cfg)
        wait_for(lambda: d2.metrics()[FIRING] == 1, what="alert restored as firing")
        wait_for(lambda: any(f["rule"] == "command_check" for f in d2.status()["findings"]), what="finding seen")
        flag.unlink()
        rx.wait_for(2)
        assert statuses(rx) == [("firing", "firing"), ("resolved", "resolved")]


def test_secrets_never_leak_and_hostile_lines_are_defused(tmp_path, make_daemon):
    flag = tmp_path / "flag"
    hostile = tmp_path / "hostile.txt"
    hostile.write_text('ERROR <!channel> <@U123> <at user_id="all">x</at> @all [pwn](http://evil.example) <b>x</b>\n')
    secrets = {
        "feishu_token": "fs-token-7d1c9e2b4a", "feishu_secret": "fs-signing-5e8f0a",
        "slack_token": "sl-token-XoXb99887766", "ding_token": "dt-token-abcdef1234", "ding_secret": "SECding-998877",
        "wecom_key": "wc-key-11223344", "bearer": "bearer-tok-55aa66bb", "dead_token": "deadman-tok-778899",
        "refused_token": "refused-tok-13579bd",
    }
    (tmp_path / "fs.secret").write_text(secrets["feishu_secret"] + "\n")
    fs = Receiver("feishu", secret=secrets["feishu_secret"], path=f"/open-apis/bot/v2/hook/{secrets['feishu_token']}")
    sl = Receiver("slack", path=f"/services/T1/B1/{secrets['slack_token']}")
    dt = Receiver("dingtalk", secret=secrets["ding_secret"], path=f"/robot/send?access_token={secrets['ding_token']}")
    wc = Receiver("wecom", path=f"/cgi-bin/webhook/send?key={secrets['wecom_key']}")
    wh = Receiver("webhook", bearer=secrets["bearer"])
    am = Receiver("alertmanager")
    dm = Receiver("deadman", path=f"/ping/{secrets['dead_token']}")
    rxs = [fs, sl, dt, wc, wh, am]
    for r in rxs + [dm]:
        r.start()
    try:
        channels = [
            {"type": "feishu", "name": "fs", "url": fs.url, "secret_file": str(tmp_path / "fs.secret"),
             "mentions": {"critical": ["all"]}},
            {"type": "slack", "name": "sl", "url": "${TEST_SLACK_URL}"},
            {"type": "dingtalk", "name": "dt", "url": dt.url, "secret": secrets["ding_secret"]},
            {"type": "wecom", "name": "wc", "url": wc.url},
            {"type": "webhook", "name": "wh", "url": wh.url, "bearer_token": secrets["bearer"]},
            {"type": "alertmanager", "name": "am", "url": am.url.rsplit("/api", 1)[0], "resend_interval": "1s",
             "alert_ttl": "10s"},
            {"type": "webhook", "name": "down",
             "url": f"http://127.0.0.1:{closed_port()}/x/{secrets['refused_token']}?t={secrets['refused_token']}"},
        ]
        cfg = {"probes": {"commands": [check(flag, hostile)]},
               "alerting": alerting(channels, deadman_url=dm.url)}
        flag.touch()
        d = make_daemon(cfg, env={"TEST_SLACK_URL": sl.url})
        for r in rxs:
            r.wait_for(1)
        am.wait_for(2)  # re-sent while firing
        wait_for(lambda: d.metrics().get('npu_watchdog_notifications_total{channel="down",result="retried"}', 0) >= 2,
                 what="refused deliveries")
        dm.wait_for(2)
        wait_for(lambda: d.metrics()['npu_watchdog_deadman_pings_total{result="ok"}'] >= 1, timeout=10,
                 what="dead-man pings counted")
        line = hostile.read_text().rstrip("\n")
        for r in rxs:
            text = r.accepted()[0].text
            if r.kind in ("dingtalk", "wecom"):
                # No code block in their markdown: the line is escaped as text, checked below
                # with the rest (its words kept: "ERROR", "pwn").
                text = chat_text(r.kind, SimpleNamespace(json=r.accepted()[0].json))
                assert "ERROR" in text and "pwn" in text, (r.kind, text)
            elif r.kind in CHAT:
                # The log line is in a code block, byte for byte but for a zero-width space that
                # defuses a mention tag; everything outside the block is escaped for the platform.
                chat = chat_text(r.kind, SimpleNamespace(json=r.accepted()[0].json))
                code = "\n".join(b for _, b in FENCED.findall(chat))
                shown = html.unescape(code) if r.kind == "slack" else code
                assert line in shown.replace("\u200b", ""), (r.kind, code)
                assert "<at user_id" not in code and "<@U123>" not in code, (r.kind, code)
                assert "<!channel>" not in code or r.kind != "slack", code  # Slack syntax, text elsewhere
                text = FENCED.sub("", chat)
            for bad in ("<!channel>", "<@U123>", "<at user_id", "@all", "](http://evil", "<b>"):
                assert bad not in text.replace("\\u003c", "<"), (r.kind, bad)
            assert ("pwn" in text and "ERROR" in text) or r.kind in CHAT, r.kind
        everything = [d.metrics_text(), http_get(d.url + "/api/status")[1], http_get(d.url + "/")[1]]
        d.stop()
        everything.append(d.log())
        for root, _, files in os.walk(tmp_path / "state"):
            for name in files:
                p = Path(root) / name
                everything.append(p.read_bytes().decode("latin-1"))
                assert (p.stat().st_mode & 0o077) == 0, p
        blob = "\n".join(everything)
        assert "connection failed" in blob  # the refused channel was logged...
        for name, value in secrets.items():
            assert value not in blob, name  # ...without its URL, and no other secret anywhere
    finally:
        for r in rxs + [dm]:
            r.stop()


def test_test_alert_prints_each_vendor_verdict(tmp_path, make_daemon):
    with Receiver("feishu", secret="good") as ok, Receiver("feishu", secret="good") as bad:
        cfg = {"alerting": {"channels": [
            {"type": "feishu", "name": "good", "url": ok.url, "secret": "good"},
            {"type": "feishu", "name": "badsig", "url": bad.url, "secret": "wrong"},
        ]}}
        d = make_daemon(cfg, start=False)
        out = run_cli("test-alert", "-c", str(d.config_path), "--severity", "critical")
        assert out.returncode == 1, out.stdout + out.stderr
        assert "good (feishu): HTTP 200, delivered (code 0 success)" in out.stdout
        assert "badsig (feishu): HTTP 200, permanent failure: code 19021" in out.stdout
        assert "TEST" in ok.wait_for(1)[0].json["card"]["header"]["title"]["content"]
        out = run_cli("test-alert", "-c", str(d.config_path), "--channel", "good")
        assert out.returncode == 0 and "badsig" not in out.stdout

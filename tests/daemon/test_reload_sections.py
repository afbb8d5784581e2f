"""A reload (SIGHUP) applies every alerting setting it accepts, one test per section: the message
language, the channels (a new URL), the routes (a channel's matchers). The next message after the
reload follows the new config; the running daemon is never restarted."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for

CJK = re.compile(r"[\u4e00-\u9fff]")


def _check(name: str, flag: Path) -> dict:
    return {"name": name, "argv": ["/bin/sh", "-c", f"test ! -e '{flag}'"], "interval": "1s", "timeout": "5s"}


def _config(tmp_path: Path, channel: dict, **alerting) -> dict:
    return {"probes": {"commands": [_check("a", tmp_path / "a"), _check("b", tmp_path / "b")]},
            "alerting": {"group_window": "300ms", "resolve_delay": "1s", "retry_initial": "300ms",
                         "retry_max": "1s", "channels": [channel], **alerting}}


def _reload(d, reloads: int) -> None:
    d.write_config(d.config)
    d.signal(signal.SIGHUP)
    wait_for(lambda: d.metrics()['npu_watchdog_config_reloads_total{result="success"}'] == reloads,
             what=f"reload {reloads} applied")


def _checks(rec) -> list:
    return sorted(a["labels"].get("check") for a in rec.json["alerts"])


def test_a_reload_of_the_language_alone_applies_to_the_next_message(make_daemon, tmp_path):
    with Receiver("webhook") as rx:
        d = make_daemon(_config(tmp_path, {"type": "webhook", "name": "hook", "url": rx.url}))
        (tmp_path / "a").touch()
        first = rx.wait_for(1)[0]
        assert first.json["status"] == "firing" and not CJK.search(first.json["title"]), first.json["title"]
        d.config["alerting"]["language"] = "zh"
        _reload(d, 1)
        (tmp_path / "b").touch()
        second = rx.wait_for(2)[1]
        assert _checks(second) == ["b"] and second.json["status"] == "firing"
        assert CJK.search(second.json["title"]), f"still in English after the reload: {second.json['title']!r}"
        assert CJK.search(second.json["alerts"][0]["annotations"]["summary"] + second.json["title"])


def test_a_reload_of_a_channel_url_sends_the_next_message_to_the_new_url(make_daemon, tmp_path):
    with Receiver("webhook") as old, Receiver("webhook") as new:
        d = make_daemon(_config(tmp_path, {"type": "webhook", "name": "hook", "url": old.url}))
        (tmp_path / "a").touch()
        assert _checks(old.wait_for(1)[0]) == ["a"]
        d.config["alerting"]["channels"] = [{"type": "webhook", "name": "hook", "url": new.url}]
        _reload(d, 1)
        (tmp_path / "b").touch()
        got = new.wait_for(1)[0]
        assert _checks(got) == ["b"] and got.json["status"] == "firing"
        wait_for(lambda: d.metrics()['npu_watchdog_notifications_total{channel="hook",result="sent"}'] == 2,
                 what="both sends counted on the one channel")
        assert len(old.accepted()) == 1, [r.json["alerts"] for r in old.accepted()]


def test_a_reload_of_a_route_applies_to_the_next_alert(make_daemon, tmp_path):
    """The channel takes only check `a`; after the reload only check `b`."""
    with Receiver("webhook") as rx:
        route = {"type": "webhook", "name": "hook", "url": rx.url, "send_resolved": False,
                 "matchers": [{"name": "check", "value": "a"}]}
        d = make_daemon(_config(tmp_path, route))
        (tmp_path / "a").touch()
        assert _checks(rx.wait_for(1)[0]) == ["a"]
        d.config["alerting"]["channels"] = [dict(route, matchers=[{"name": "check", "value": "b"}])]
        _reload(d, 1)
        (tmp_path / "b").touch()
        got = rx.wait_for(2)[1]
        assert _checks(got) == ["b"]
        # `a` fires on, unrouted now: nothing more was sent for it.
        assert [_checks(r) for r in rx.accepted()] == [["a"], ["b"]]


def test_a_reload_says_which_accepted_settings_wait_for_a_restart(make_daemon, tmp_path):
    """The HTTP listener and the log format are set up once: the reload is accepted, says so in
    one line naming them, and the daemon keeps serving on its port."""
    with Receiver("webhook") as rx:
        d = make_daemon(_config(tmp_path, {"type": "webhook", "name": "hook", "url": rx.url}))
        d.config["http"] = dict(d.config["http"], max_connections=32)
        d.config["logging"] = {"format": "json"}
        d.config["alerting"]["group_window"] = "500ms"
        _reload(d, 1)
        wait_for(lambda: "at the next restart" in d.log(), what="the restart note")
        [note] = [ln for ln in d.log().splitlines() if "at the next restart" in ln]
        assert "http.max_connections" in note and "logging.format" in note and "group_window" not in note
        assert d.metrics()['npu_watchdog_config_reloads_total{result="success"}'] == 1

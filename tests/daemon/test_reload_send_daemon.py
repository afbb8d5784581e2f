"""The real daemon reloaded (SIGHUP) while a channel's send is under way: the notification is
delivered once, and the next one still goes out through the channel's one sender."""

from __future__ import annotations

import signal

from tests.fakes.receivers import Answer, Receiver
from tests.helpers import wait_for


def _check(flag) -> dict:
    return {"name": "flag", "argv": ["/bin/sh", "-c", f"test ! -e '{flag}'"], "interval": "1s", "timeout": "5s"}


def test_sighup_during_a_send_delivers_once(make_daemon, tmp_path) -> None:
    flag = tmp_path / "flag"
    with Receiver("webhook") as rx:
        rx.script(Answer(200, "", delay=4.0))  # longer than a sender is waited for on a restart
        channel = {"type": "webhook", "name": "hook", "url": rx.url}
        cfg = {"probes": {"commands": [_check(flag)]},
               "alerting": {"group_window": "300ms", "resolve_delay": "1s", "retry_initial": "300ms",
                            "retry_max": "1s", "channels": [channel]}}
        d = make_daemon(cfg)
        flag.touch()
        rx.wait_arrived(1)  # the firing message is being sent; its answer comes in 4 s
        d.config["alerting"]["channels"] = [dict(channel, rate_limits=[{"count": 5, "per": "1s"}])]
        d.write_config(d.config)
        d.signal(signal.SIGHUP)
        wait_for(lambda: d.metrics()['npu_watchdog_config_reloads_total{result="success"}'] == 1, what="reload")
        wait_for(lambda: d.metrics()['npu_watchdog_notifications_total{channel="hook",result="sent"}'] == 1,
                 what="the firing message delivered")
        flag.unlink()
        rx.wait_for(1)  # the resolved message (the scripted answer is not counted as accepted)
        wait_for(lambda: d.metrics()['npu_watchdog_notifications_total{channel="hook",result="sent"}'] == 2,
                 what="the resolved message delivered")
        d.stop()
        kinds = [r.json["status"] for r in rx.requests]
        assert rx.arrived == len(rx.requests) == 2, kinds
        assert kinds == ["firing", "resolved"]

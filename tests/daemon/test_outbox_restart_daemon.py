"""The real daemon killed (SIGKILL) after a vendor received a message but before the daemon
recorded the delivery: after the restart the message is sent again (never lost), marked as a
possible repeat where the vendor cannot deduplicate (chat), with the same idempotency key where it
can (webhook), and nothing else follows: no second page, no false resolve."""

from __future__ import annotations

import threading
import time

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for

CHAT = ("slack", "feishu", "dingtalk", "wecom")
KINDS = CHAT + ("webhook", "alertmanager")
#: Words of the visible repeat line (checked in the raw payload of each chat vendor).
REPEAT_WORDS = "may repeat a message already delivered"


def _check(flag) -> dict:
    return {"name": "flag", "argv": ["/bin/sh", "-c", f"test ! -e '{flag}'"], "interval": "1s", "timeout": "2s"}


def _resolved(kind: str, rec) -> bool:
    if kind == "webhook":
        return rec.json["status"] == "resolved"
    if kind == "alertmanager":
        return all(a["endsAt"] <= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) for a in rec.json)
    return "RESOLVED" in rec.text


def _counts(rxs) -> dict:
    out = {}
    for kind, rx in rxs.items():
        reqs = list(rx.requests)
        res = sum(1 for r in reqs if _resolved(kind, r))
        out[kind] = {"firing": len(reqs) - res, "resolved": res}
    return out


def test_sigkill_between_receipt_and_bookkeeping_resends_marked_once(make_daemon, tmp_path) -> None:
    flag = tmp_path / "flag"
    gate = threading.Event()
    rxs = {k: Receiver(k).start() for k in KINDS}
    try:
        for rx in rxs.values():
            rx.hold(gate)  # every vendor gets the page but answers only after the kill
        channels = [{"type": k, "name": k, "url": rx.url, "min_severity": "info"} for k, rx in rxs.items()]
        channels[-1].update(resend_interval="10m", alert_ttl="20m")  # no Alertmanager refresh in this test
        cfg = {"probes": {"commands": [_check(flag)]},
               "alerting": {"group_window": "300ms", "resolve_delay": "1s", "retry_initial": "300ms",
                            "retry_max": "1s", "reminder": "0s", "channels": channels}}
        d = make_daemon(cfg)
        flag.touch()
        for rx in rxs.values():
            rx.wait_arrived(1)  # each vendor has the page; the daemon waits for the answer
        d.kill9()  # between the receipt and the bookkeeping, on every channel at once
        gate.set()
        for rx in rxs.values():
            rx.wait_for(1, accepted=False)  # the held answers went out to nobody
        d.start()
        for kind, rx in rxs.items():
            wait_for(lambda: len(rx.requests) >= 2, timeout=30, what=f"{kind}: the page re-sent after the restart")
        time.sleep(8)  # past resolve_delay and the check's warm-up: a second page or a false resolve shows
        assert _counts(rxs) == {k: {"firing": 2, "resolved": 0} for k in KINDS}, _counts(rxs)
        for kind in CHAT:
            first, again = rxs[kind].requests[:2]
            assert REPEAT_WORDS not in first.text, kind
            assert REPEAT_WORDS in again.text, (kind, again.text[:600])
        first, again = rxs["webhook"].requests[:2]
        assert again.headers["Idempotency-Key"] == first.headers["Idempotency-Key"] == first.json["idempotencyKey"]
        assert again.json["idempotencyKey"] == first.json["idempotencyKey"]
        assert again.json["possibleRepeat"] is True and first.json["possibleRepeat"] is False
        first, again = rxs["alertmanager"].requests[:2]
        assert [a["labels"] for a in again.json] == [a["labels"] for a in first.json]  # one alert to Alertmanager

        flag.unlink()
        for kind, rx in rxs.items():
            wait_for(lambda: len(rx.requests) >= 3, timeout=30, what=f"{kind}: the resolve")
        time.sleep(3)
        assert _counts(rxs) == {k: {"firing": 2, "resolved": 1} for k in KINDS}, _counts(rxs)
        for kind in CHAT:
            assert REPEAT_WORDS not in rxs[kind].requests[2].text, kind  # a normal send is not marked
        d.stop()
    finally:
        gate.set()
        for rx in rxs.values():
            rx.stop()

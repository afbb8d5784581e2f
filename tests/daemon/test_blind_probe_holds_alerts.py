"""A probe that cannot see is not the fault clearing. npu-smi timing out (a loaded node, a driver
busy with the very card that fell off) once made the npu rules' findings vanish: the lost card's
alert resolved, then paged again when the next round saw the card still gone (two pages and two
resolutions for one fault). The real daemon against the fake npu-smi, counting what the channel
received.

The command timeout is 3 s (the fake answers in well under 1 s on an idle machine) and the hang
6 s: on a loaded machine a plain answer can still take longer than the timeout now and then. That
is a real npu_smi_hung episode, paged and resolved like the others, so the hung alert is counted as
episodes (each firing resolved), and the lost card's alert exactly: one firing, one resolved.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.fakes.receivers import Receiver
from tests.helpers import TESTS, wait_for

FAKE = str(TESTS / "fakes" / "npu-smi")

BASE = {"generate": {"npus": 2}}
GONE = {**BASE, "devices": {"1": {"gone": True}}}


def write_scenario(path: Path, spec: dict) -> None:
    """Atomically: the fake npu-smi never reads half a scenario."""
    path.with_suffix(".tmp").write_text(json.dumps(spec))
    os.replace(path.with_suffix(".tmp"), path)


def config(pager: Receiver) -> dict:
    return {
        "probes": {"jitter": "0s",
                   "npu": {"enabled": True, "interval": "1s", "npu_smi": FAKE, "command_timeout": "3s",
                           "health_interval": "0s", "failing_after": "1s"}},
        "alerting": {"group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms",
                     "retry_max": "1s", "channels": [{"type": "webhook", "name": "pager", "url": pager.url}]},
    }


def sent(rx):
    return [(r.json["status"], a["labels"]["alertname"]) for r in rx.accepted() for a in r.json["alerts"]]


def test_a_lost_card_stays_one_alert_while_npu_smi_cannot_answer(make_daemon, tmp_path: Path) -> None:
    scen = tmp_path / "scenario.json"
    write_scenario(scen, BASE)
    with Receiver("webhook") as pager:
        d = make_daemon(config(pager), env={"FAKE_NPU_SMI_SCENARIO": str(scen)})
        wait_for(lambda: d.metrics().get("npu_watchdog_npus_seen") == 2, what="both cards seen")
        write_scenario(scen, GONE)
        pager.wait_for(1)
        assert sent(pager) == [("firing", "npu_missing")]
        # npu-smi hangs past the command timeout for several resolve delays: the probe is blind.
        write_scenario(scen, {**GONE, "delay_seconds": 6})
        wait_for(lambda: "npu_smi_hung" in {f["rule"] for f in d.status()["findings"]}, what="npu_smi_hung")
        wait_for(lambda: d.metrics().get('npu_watchdog_npu_smi_failures_total{reason="timeout"}', 0) >= 4,
                 what="four timed-out rounds (past the resolve delay)")
        # Blind for several resolve delays: the card's alert neither resolved nor paged again.
        assert [m for m in sent(pager) if m[1] == "npu_missing"] == [("firing", "npu_missing")], sent(pager)
        write_scenario(scen, GONE)  # it answers again: the card is still gone
        wait_for(lambda: ("resolved", "npu_smi_hung") in sent(pager), what="npu-smi answers again")
        runs = d.metrics()["npu_watchdog_probe_runs_total{probe=\"npu\"}"]
        wait_for(lambda: d.metrics()["npu_watchdog_probe_runs_total{probe=\"npu\"}"] >= runs + 4,
                 what="rounds that see the card still gone (past the resolve delay)")
        assert [m for m in sent(pager) if m[1] == "npu_missing"] == [("firing", "npu_missing")], sent(pager)
        write_scenario(scen, BASE)  # the card is back: now it resolves, once
        wait_for(lambda: ("resolved", "npu_missing") in sent(pager), what="the card's resolution")
        hung = lambda status: sum(m == (status, "npu_smi_hung") for m in sent(pager))  # noqa: E731
        wait_for(lambda: hung("firing") == hung("resolved"), what="every npu_smi_hung episode resolved")
        assert [m for m in sent(pager) if m[1] == "npu_missing"] == [("firing", "npu_missing"),
                                                                     ("resolved", "npu_missing")], sent(pager)
        assert hung("firing") >= 1 and {m[1] for m in sent(pager)} == {"npu_missing", "npu_smi_hung"}, sent(pager)
        assert all(r.json["alerts"][0]["labels"]["host"] == "node-t" for r in pager.accepted())

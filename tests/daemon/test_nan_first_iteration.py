"""A NaN alert names where the divergence began (the first NaN line or heartbeat), when it was
first seen, and how many lines followed: on-call rolls back to before the first one."""

from __future__ import annotations

import math
import time

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from watchdog.alerting.decide.notification import AlertNote
from watchdog.alerting.words.digest import RuleGroup
from watchdog.alerting.words.render import Message

NAN_LINE = "iteration {n} | lm loss: nan | grad norm: nan | loss scale: 1.0"


@pytest.mark.slow
def test_three_nan_lines_from_5426_name_5426_in_title_hint_and_count(make_daemon, tmp_path):
    """The real daemon reads three NaN lines (5426, 5427, 5428) in one go and later ones while
    the alert waits in its group window: every message names 5426, never a later iteration."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_text("iteration 5425 | lm loss: 2.31 | grad norm: 1.2\n")
    with Receiver("slack") as slack, Receiver("webhook") as hook:
        d = make_daemon({
            "probes": {"jitter": "0s", "logs": {"enabled": True, "interval": "1s",
                                                "sources": [{"name": "train", "paths": [str(logdir / "*.log")]}]}},
            "alerting": {"group_window": "2s", "channels": [
                {"type": "slack", "name": "s", "url": slack.url, "min_severity": "info"},
                {"type": "webhook", "name": "w", "url": hook.url, "min_severity": "info"}]}})
        wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
        first_written = time.time()
        with open(log, "a") as fh:
            fh.write("".join(NAN_LINE.format(n=n) + "\n" for n in (5426, 5427, 5428)))
        wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "log_nan"], what="log_nan")
        with open(log, "a") as fh:  # more NaN lines before the send: still 5426
            fh.write(NAN_LINE.format(n=5429) + "\n")
        [s] = slack.wait_for(1)
        [w] = hook.wait_for(1)
    title = s.json["blocks"][0]["text"]["text"]
    assert "NaN loss from iteration 5426 on rank 0" in title, title
    assert "5427" not in title and "5428" not in title and "5429" not in title
    assert title.endswith("lines"), title
    [a] = w.json["alerts"]
    assert "iteration 5426" in a["annotations"]["summary"], a["annotations"]
    assert "iteration 5426" in a["annotations"]["description"], a["annotations"]
    assert abs(_epoch(a["startsAt"]) - first_written) < 30  # the first line's time, not the send's


@pytest.mark.slow
def test_after_a_restart_the_nan_match_goes_on_from_its_first_line(make_daemon, tmp_path):
    """A match saved at stop and read back at start continues (same key as a new line of it):
    after a restart the finding still names the first NaN iteration and counts every line,
    instead of a second match from the first line read after the restart."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "train_rank0.log"
    log.write_text("iteration 110 | lm loss: 2.31 | grad norm: 1.2\n")
    config = {"probes": {"jitter": "0s", "logs": {"enabled": True, "interval": "1s", "hold": "10m",
                                                  "sources": [{"name": "train", "paths": [str(logdir / "*.log")]}]}},
              "alerting": {"channels": []}}

    def nan_findings(d):
        return [f for f in d.status()["findings"] if f["rule"] == "log_nan"]

    def write(*ns):
        with open(log, "a") as fh:
            fh.write("".join(NAN_LINE.format(n=n) + "\n" for n in ns))

    d = make_daemon(config)
    wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
    write(111, 112, 113, 114)
    def counts(d):
        return [(f["details"]["count"], f["details"]["first_line"].split(" |")[0]) for f in nan_findings(d)]

    wait_for(lambda: counts(d) == [(4, "iteration 111")], what="the first four lines")
    d.stop()
    write(115, 116)  # while the daemon is down: read after the restart
    d.start()
    wait_for(lambda: counts(d) == [(6, "iteration 111")], what="six lines counted after the restart")
    write(117)
    wait_for(lambda: counts(d) == [(7, "iteration 111")], what="seven lines, one match")
    found = nan_findings(d)
    assert len(found) == 1, found
    assert "iteration 111" in found[0]["summary"] and "115" not in found[0]["summary"], found[0]


def _epoch(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _alert(rule, rank, summary, count=None, since=1000.0):
    return AlertNote.from_json(_alert_body(rule, rank, summary, count, since))


def _alert_body(rule, rank, summary, count=None, since=1000.0):
    return {"fp": f"{rule}{rank}", "rule": rule, "severity": "critical", "status": "firing", "summary": summary,
            "labels": {"host": "n", "training_job": "j", "rank": str(rank)}, "hint": "", "value": None,
            "since": since, "starts_at": since, "ends_at": None, "evidence": [], "snapshot": None,
            "dashboard": None, "count": count}


def test_the_headline_counts_lines_and_says_from_where_they_began():
    g = RuleGroup("log_nan", "critical", [_alert("log_nan", r, "NaN (rank %d): " % r + NAN_LINE.format(n=30), 5)
                                         for r in range(8)])
    assert g.headline == "NaN loss from iteration 30 on ranks 0-7, 40 lines"
    one = RuleGroup("log_nan", "critical", [_alert("log_nan", 0, NAN_LINE.format(n=30), 1)])
    assert one.headline == "NaN loss at iteration 30 on rank 0"
    msg = Message({"kind": "firing", "status": "firing", "ikey": "k", "created": 0.0,
                   "group": {"host": "n", "training_job": "j"}, "alerts": [g.alerts[0]]})
    assert "from iteration 30" in msg.title()


def _hb_view(readings_by_time, logs_active=()):
    """A StateView over heartbeat samples (rank 0) and, optionally, the log probe's matches."""
    from watchdog.config.load import load_config_text
    from watchdog.observations import HeartbeatObservation, HeartbeatReading
    from watchdog.probes.logs import LogProbeObservation
    from watchdog.core.state import StateStore

    cfg = load_config_text("probes: {heartbeat: {enabled: true, paths: ['/x/rank*.json']}}")
    st = StateStore()
    for t, step, loss in readings_by_time:
        r = HeartbeatReading(path="/x/rank0.json", rank=0, exists=True, mtime=t, beat_time=t, step=step, loss=loss,
                             grad_norm=1.0, step_changed_at=t)
        st.put("heartbeat", HeartbeatObservation(readings=(r,)), at=t)
    if logs_active:
        st.put("logs", LogProbeObservation(events=(), active=tuple(logs_active)), at=readings_by_time[-1][0])
    return st.view(now=readings_by_time[-1][0] + 0.1), cfg


def test_heartbeat_nan_names_the_first_nan_step_and_its_time():
    from watchdog.detectors.liveness import _nan_finding

    view, cfg = _hb_view([(100.0, 29, 2.0), (101.0, 30, math.nan), (102.0, 31, math.nan), (103.0, 34, math.nan)])
    r = view.latest("heartbeat").value.readings[0]
    f = _nan_finding(view, cfg, r, "0", {"rank": "0"}, {})
    assert "from step 30" in f.summary and "newest step 34" in f.summary, f.summary
    assert f.since == 101.0


def test_heartbeat_nan_takes_the_earlier_iteration_of_the_ranks_first_nan_log_line():
    """The heartbeat is written at most every so often: it skipped step 30; the log line names it."""
    from watchdog.detectors.liveness import _nan_finding
    from watchdog.probes.logs import ActiveMatch

    line = NAN_LINE.format(n=30)
    match = ActiveMatch(rule="nan_loss", category="nan", severity="critical", role="root", title="NaN loss",
                        rank="0", source="train", path="/x/rank0.log", first_at=100.5, last_at=103.0, count=5,
                        summary=NAN_LINE.format(n=34), evidence=(), first_summary=line)
    view, cfg = _hb_view([(100.0, 29, 2.0), (102.0, 32, math.nan), (103.0, 34, math.nan)], [match])
    r = view.latest("heartbeat").value.readings[0]
    f = _nan_finding(view, cfg, r, "0", {"rank": "0"}, {})
    assert "from iteration 30" in f.summary, f.summary
    assert f.since == 100.5 and f.details["count"] == 5
    g = RuleGroup("loss_nan", "critical", [AlertNote.from_json({**_alert_body("loss_nan", 0, f.summary, f.details["count"]),
                                                                "since": f.since})])
    assert g.headline == "NaN loss from iteration 30 on rank 0, 5 lines"

"""contrib/alertmanager: the shipped config passes `amtool check-config`, routes a job's alerts from
every node into one group, drops what the nodes sent themselves, and its templates name the
earliest root alert first (amtool renders them with a fleet incident)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from tests.helpers import REPO

AM_DIR = REPO / "contrib" / "alertmanager"
AMTOOL = shutil.which("amtool")
needs_amtool = pytest.mark.skipif(AMTOOL is None, reason="amtool is not installed (Debian package `prometheus-alertmanager`)")


def am_alert(rule, host, first_seen, role="symptom", **labels):
    return {"status": "firing", "labels": {"alertname": rule, "severity": "critical", "role": role, "host": host,
                                           "training_job": "llm", **labels},
            "annotations": {"summary": f"{rule} on {host}", "first_seen": first_seen, "log_lines": f"{rule} line"},
            "startsAt": "2026-01-01T01:00:00Z", "endsAt": "0001-01-01T00:00:00Z"}


def render(tmp_path, alerts, what):
    common = {k: v for k, v in alerts[0]["labels"].items() if all(a["labels"].get(k) == v for a in alerts)}
    data = {"receiver": "relay", "status": "firing", "groupLabels": {"training_job": "llm"},
            "commonLabels": common, "commonAnnotations": {}, "alerts": alerts}
    (tmp_path / "data.json").write_text(json.dumps(data))
    r = subprocess.run([AMTOOL, "template", "render", f"--template.glob={AM_DIR / 'templates' / '*.tmpl'}",
                        f"--template.data={tmp_path / 'data.json'}", f"--template.text={{{{ template \"{what}\" . }}}}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@needs_amtool
def test_shipped_config_is_valid(tmp_path):
    cfg = yaml.safe_load((AM_DIR / "alertmanager.yml").read_text())
    cfg["templates"] = [str(AM_DIR / "templates" / "*.tmpl")]
    (tmp_path / "slack.url").write_text("https://hooks.slack.com/services/T0/B0/x\n")
    for rc in cfg["receivers"]:
        for s in rc.get("slack_configs", []):
            s["api_url_file"] = str(tmp_path / "slack.url")
    (tmp_path / "am.yml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([AMTOOL, "check-config", str(tmp_path / "am.yml")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_amtool
@pytest.mark.parametrize("labels,receiver", [
    ("training_job=llm host=node-01 alertname=stall role=symptom", "npu-watchdog-relay"),
    ("training_job=llm host=node-01 alertname=npu_missing role=root delivery=node", "blackhole"),
    ("alertname=watchdog_down instance=n1:9841", "npu-watchdog-relay"),
    # A log-visible root cause: its own fast group, and the job's group too (`continue`).
    ("training_job=llm host=node-01 alertname=log_oom role=root severity=critical",
     "npu-watchdog-relay,npu-watchdog-relay"),
    ("training_job=llm host=node-01 alertname=loss_nan role=root severity=critical",
     "npu-watchdog-relay,npu-watchdog-relay"),
    ("training_job=llm host=node-01 alertname=log_hccl role=symptom severity=critical", "npu-watchdog-relay"),
])
def test_routes(labels, receiver):
    r = subprocess.run([AMTOOL, "config", "routes", "test", f"--config.file={AM_DIR / 'alertmanager.yml'}", *labels.split()],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == receiver, r.stdout + r.stderr


@needs_amtool
def test_templates_name_the_earliest_root_first(tmp_path):
    alerts = [
        am_alert("log_hccl", "node-02", "2026-01-01T00:00:01.000Z", rank="9"),  # a symptom seen earlier
        am_alert("log_oom", "node-09", "2026-01-01T00:00:20.000Z", role="root", rank="70"),
        am_alert("log_oom", "node-07", "2026-01-01T00:00:05.000Z", role="root", rank="3", npu="3"),
        am_alert("log_hccl", "node-03", "2026-01-01T00:30:00.000Z", rank="17"),
    ]
    title = render(tmp_path, alerts, "npu_watchdog.title")
    assert title == "[CRITICAL] llm: first failure log_oom on node-07 rank=3 npu=3 | 4 alerts on this job"
    text = render(tmp_path, alerts, "npu_watchdog.text")
    assert "log_oom line" in text and "log_hccl" not in text  # the symptoms are counted, not listed
    hang = [am_alert("stall", "node-05", "2026-01-01T00:00:09.000Z"), am_alert("stall", "node-11", "2026-01-01T00:00:02.000Z")]
    assert "no root cause reported; earliest stall on node-11 |" in render(tmp_path, hang, "npu_watchdog.title")


def test_log_visible_root_causes_have_a_fast_route():
    """The route that pages a log-visible root cause within 15 s of its line (measured in
    tests/e2e/test_fleet_first_page.py): its own group per job, a group_wait that fits the budget
    with the node's logs interval and group window, and `continue` into the job's group."""
    route = yaml.safe_load((AM_DIR / "alertmanager.yml").read_text())["route"]
    fast = [r for r in route["routes"] if any("log_oom" in m for m in r.get("matchers", []))]
    assert len(fast) == 1
    (r,) = fast
    assert r["group_by"] == ["training_job"] and r["continue"] is True and r["receiver"] == "npu-watchdog-relay"
    assert r["group_wait"] == "5s" and route["group_wait"] == "30s"
    assert not any("log_hccl" in m for m in r["matchers"])

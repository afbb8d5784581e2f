"""The real Prometheus and Alertmanager (Debian's `prometheus`, `prometheus-alertmanager`) against the
real daemon on 127.0.0.1: Prometheus scrapes it (fed by the fake npu-smi), the series arrive with
the labels the README's scrape convention promises, `promtool check metrics` is clean, the shipped
rules load and evaluate, the dashboard's queries are valid PromQL; the `alertmanager` channel's
alerts arrive in Alertmanager, can be silenced there, and resolve.

Every server is started on a free port with its own temporary storage and stopped at test end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, List, Optional

import pytest
import yaml

from tests.helpers import REPO, TESTS, free_port, http_get, wait_for, Server

HERE = TESTS
FAKE_NPU_SMI = HERE / "fakes" / "npu-smi"
RULES = REPO / "contrib" / "prometheus" / "npu-watchdog.rules.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "npu-watchdog.json"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

@pytest.fixture
def servers():
    started: List[Server] = []
    yield started
    for s in started:
        s.stop()


def get_json(url: str) -> Any:
    code, body = http_get(url)
    assert code == 200, f"{url}: HTTP {code}: {body[:500]}"
    return json.loads(body)


def prom_query(base: str, expr: str) -> list:
    doc = get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def write_scenario(path: Path, spec: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(spec))
    os.replace(tmp, path)


def dashboard_queries() -> List[str]:
    """The dashboard's PromQL with its variables set to `all`, as Grafana would send it."""
    dash = json.loads(DASHBOARD.read_text())
    out = [t["expr"] for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]
    subst = {"$__rate_interval": "1m", "$__range": "5m", "$__interval": "15s", "$host": ".*", "$training_job": ".*", "$npu": ".*"}
    for k, v in subst.items():
        out = [e.replace(k, v) for e in out]
    return out


@pytest.mark.slow  # ~25 s: Prometheus start-up, scrapes and a rule evaluation round
@pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None,
                    reason="prometheus/promtool are not installed (Debian package `prometheus`)")
def test_prometheus_scrapes_the_daemon_and_loads_the_rules(tmp_path, make_daemon, servers):
    scen = tmp_path / "scenario.json"
    write_scenario(scen, {"generate": {"npus": 8}, "devices": {"3": {"health": "Alarm", "hbm_used_mb": 41000}}})
    d = make_daemon({"node": {"name": "node-p"}, "job": {"name": "llm-7b"},
                     "probes": {"npu": {"enabled": True, "interval": "1s", "npu_smi": str(FAKE_NPU_SMI),
                                        "command_timeout": "2s", "health_interval": "0s"}}},
                    env={"FAKE_NPU_SMI_SCENARIO": str(scen)})
    wait_for(lambda: "npu_watchdog_npus_seen" in d.metrics(), timeout=30, what="npu metrics from the fake npu-smi")

    # The exposition passes promtool's lint.
    text = d.metrics_text()
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr

    port = free_port()
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        # honor_labels stays false (the default); the daemon exports no `job` or `instance` of its
        # own, so nothing is renamed to `exported_*`.
        "scrape_configs": [{"job_name": "npu-watchdog", "static_configs": [{"targets": [f"127.0.0.1:{d.port}"]}]}],
    }))
    prom = Server([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                   f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                  tmp_path / "prometheus.log")
    servers.append(prom)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: prom.alive() and http_get(base + "/-/ready")[0] == 200, timeout=60, what="prometheus ready")

    info = wait_for(lambda: prom_query(base, "npu_watchdog_node_info"), timeout=60, what="a scrape of the daemon")
    assert info[0]["metric"] == {"__name__": "npu_watchdog_node_info", "job": "npu-watchdog",
                                 "instance": f"127.0.0.1:{d.port}", "host": "node-p", "training_job": "llm-7b"}
    up = prom_query(base, 'up{job="npu-watchdog"}')
    assert [s["value"][1] for s in up] == ["1"]
    hbm = prom_query(base, "npu_watchdog_npu_hbm_used_bytes")
    assert sorted(int(s["metric"]["npu"]) for s in hbm) == list(range(8))
    assert all(set(s["metric"]) == {"__name__", "job", "instance", "npu", "chip"} for s in hbm), hbm
    by_npu = {s["metric"]["npu"]: float(s["value"][1]) for s in hbm}
    assert by_npu["3"] == 41000 * 1024 * 1024

    # The shipped rules load, evaluate without errors, and join real series as the README says.
    def rules_evaluated() -> Optional[list]:
        groups = get_json(base + "/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r["health"] != "unknown" for r in rules) else None

    rules = wait_for(rules_evaluated, timeout=60, what="every rule evaluated once")
    shipped = yaml.safe_load(RULES.read_text())
    assert len(rules) == sum(len(g["rules"]) for g in shipped["groups"])
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok" or r.get("lastError")]
    assert not bad, bad
    nodes = wait_for(lambda: prom_query(base, "training_job:npu_watchdog_nodes:count"), timeout=30, what="recording rule")
    assert nodes[0]["metric"] == {"__name__": "training_job:npu_watchdog_nodes:count", "training_job": "llm-7b"}
    unhealthy = wait_for(lambda: prom_query(base, "instance:npu_watchdog_npus_unhealthy:sum > 0"), timeout=30,
                         what="the unhealthy NPU counted per node")
    assert unhealthy[0]["metric"]["host"] == "node-p" and unhealthy[0]["value"][1] == "1"

    # Every dashboard query is valid PromQL and the NPU panels find data.
    for expr in dashboard_queries():
        doc = get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert doc["status"] == "success", (expr, doc)
    util = prom_query(base, dashboard_queries()[0])
    assert len(util) == 8 and all(s["metric"]["host"] == "node-p" for s in util), util


def am_alerts(base: str) -> list:
    return [a for a in get_json(base + "/api/v2/alerts") if a["labels"].get("alertname") == "command_check"]


@pytest.mark.skipif(ALERTMANAGER is None, reason="alertmanager is not installed (Debian package `prometheus-alertmanager`)")
def test_alertmanager_channel_alerts_arrive_silence_and_resolve(tmp_path, make_daemon, servers):
    port = free_port()
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "blackhole", "group_wait": "1s", "group_interval": "1s"},
        "receivers": [{"name": "blackhole"}],
    }))
    am = Server([ALERTMANAGER, f"--config.file={tmp_path / 'alertmanager.yml'}",
                 f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{port}",
                 "--cluster.listen-address="], tmp_path / "alertmanager.log")
    servers.append(am)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: am.alive() and http_get(base + "/-/ready")[0] == 200, timeout=60, what="alertmanager ready")

    flag = tmp_path / "flag"
    flag.touch()
    d = make_daemon({
        "node": {"name": "node-a"}, "job": {"name": "llm-7b"},
        "probes": {"commands": [{"name": "flag", "argv": ["/bin/sh", "-c", f"test ! -e '{flag}'"],
                                 "interval": "1s", "timeout": "5s", "hint": "remove the flag"}]},
        "alerting": {"group_window": "300ms", "resolve_delay": "1s", "retry_initial": "300ms", "retry_max": "1s",
                     "channels": [{"type": "alertmanager", "name": "am", "url": base,
                                   "resend_interval": "1s", "alert_ttl": "30s"}]},
    })
    alerts = wait_for(lambda: am_alerts(base), timeout=60, what="the alert in alertmanager")
    a = alerts[0]
    assert a["labels"]["host"] == "node-a" and a["labels"]["training_job"] == "llm-7b"
    assert a["labels"]["severity"] == "warning" and a["labels"]["check"] == "flag"
    assert a["status"]["state"] == "active"

    # A silence created in Alertmanager suppresses it there.
    now = datetime.now(timezone.utc)
    body = json.dumps({
        "matchers": [{"name": "alertname", "value": "command_check", "isRegex": False, "isEqual": True},
                     {"name": "host", "value": "node-a", "isRegex": False, "isEqual": True}],
        "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat(),
        "createdBy": "npu-watchdog tests", "comment": "maintenance on node-a",
    }).encode()
    req = urllib.request.Request(base + "/api/v2/silences", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        silence_id = json.loads(r.read())["silenceID"]
    suppressed = wait_for(lambda: [x for x in am_alerts(base) if x["status"]["state"] == "suppressed"],
                          timeout=30, what="the alert suppressed by the silence")
    assert suppressed[0]["status"]["silencedBy"] == [silence_id]

    # The condition clears: the daemon resolves the alert (endsAt now) long before alert_ttl.
    flag.unlink()
    wait_for(lambda: not am_alerts(base), timeout=25, what="the alert resolved in alertmanager")
    wait_for(lambda: d.metrics()['npu_watchdog_notifications_total{channel="am",result="sent"}'] >= 2,
             timeout=10, what="both pushes counted")


@pytest.mark.slow  # ~20 s: Prometheus and Alertmanager start-up, a scrape and a push
@pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None,
                    reason="prometheus/alertmanager are not installed (Debian `prometheus`, `prometheus-alertmanager`)")
def test_pushed_alert_and_scraped_series_share_the_training_job_label(tmp_path, make_daemon, servers):
    """One matcher, `training_job="llm-7b"`, selects the daemon's series in Prometheus and its
    alerts in Alertmanager: same label name and value on both paths, nothing renamed `exported_*`."""
    am_port, prom_port = free_port(), free_port()
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "blackhole", "group_by": ["training_job"], "group_wait": "1s"},
        "receivers": [{"name": "blackhole"}]}))
    am = Server([ALERTMANAGER, f"--config.file={tmp_path / 'alertmanager.yml'}",
                 f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                 "--cluster.listen-address="], tmp_path / "alertmanager.log")
    servers.append(am)
    am_base = f"http://127.0.0.1:{am_port}"
    wait_for(lambda: am.alive() and http_get(am_base + "/-/ready")[0] == 200, timeout=60, what="alertmanager ready")
    d = make_daemon({
        "node": {"name": "node-a"}, "job": {"name": "llm-7b"},
        "probes": {"commands": [{"name": "flag", "argv": ["/bin/false"], "interval": "1s", "timeout": "5s"}]},
        "alerting": {"group_window": "300ms", "channels": [{"type": "alertmanager", "name": "am", "url": am_base,
                                                            "resend_interval": "1s", "alert_ttl": "30s"}]},
    })
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "npu-watchdog", "static_configs": [{"targets": [f"127.0.0.1:{d.port}"]}]}],
    }))
    prom = Server([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                   f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                  tmp_path / "prometheus.log")
    servers.append(prom)
    prom_base = f"http://127.0.0.1:{prom_port}"
    wait_for(lambda: prom.alive() and http_get(prom_base + "/-/ready")[0] == 200, timeout=60, what="prometheus ready")

    matcher = 'training_job="llm-7b"'
    series = wait_for(lambda: prom_query(prom_base, "{" + matcher + ', __name__=~"npu_watchdog_.*"}'),
                      timeout=60, what="scraped series selected by the matcher")
    pushed = wait_for(lambda: get_json(am_base + "/api/v2/alerts?" + urllib.parse.urlencode({"filter": matcher})),
                      timeout=60, what="the pushed alert selected by the same matcher")
    assert [a["labels"]["alertname"] for a in pushed] == ["command_check"]
    node_info = [s["metric"] for s in series if s["metric"]["__name__"] == "npu_watchdog_node_info"]
    assert node_info == [{"__name__": "npu_watchdog_node_info", "job": "npu-watchdog",
                          "instance": f"127.0.0.1:{d.port}", "host": "node-a", "training_job": "llm-7b"}]
    assert {k: pushed[0]["labels"][k] for k in ("host", "training_job")} == {"host": "node-a", "training_job": "llm-7b"}
    assert "job" not in pushed[0]["labels"]
    everything = prom_query(prom_base, '{__name__=~"npu_watchdog_.*"}')
    assert not [s["metric"]["__name__"] for s in everything if any(k.startswith("exported_") for k in s["metric"])]

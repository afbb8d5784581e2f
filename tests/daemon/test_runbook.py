"""The runbook the daemon serves itself: every rule has a section in every shipped language, the
page is plain safe HTML with one id per rule, and the links in messages reach it with no network
beyond the node (or reach a configured external base, which wins)."""

from __future__ import annotations

import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from tests.fakes.receivers import Receiver
from tests.helpers import REPO, check_link, http_get, message_links, run_cli
from watchdog import runbook
from watchdog.config.load import load_config_text
from watchdog.core.rulecatalog import names


def _prometheus_alerts():
    doc = yaml.safe_load((REPO / "contrib" / "prometheus" / "npu-watchdog.rules.yml").read_text())
    return [r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r]


@pytest.mark.parametrize("lang", runbook.languages())
def test_every_rule_the_daemon_or_prometheus_raises_has_one_section(lang):
    anchors = runbook.anchors(lang)
    assert len(anchors) == len(set(anchors)), "a rule has two sections"
    wanted = set(names()) | {"test_alert"} | set(_prometheus_alerts())
    assert not wanted - set(anchors), f"{lang}.md has no section for {sorted(wanted - set(anchors))}"
    page = runbook.page(lang).decode()
    for a in wanted:
        assert f'<h2 id="{a}">' in page


def test_english_is_shipped_and_docs_page_is_generated_from_it():
    assert runbook.languages()[0] == "en"
    docs = (REPO / "docs" / "runbook.md").read_text(encoding="utf-8")
    assert docs == runbook.docs_page(), "run `make docs`: docs/runbook.md is generated from watchdog/runbook/en.md"
    assert docs.replace(docs.splitlines()[2] + "\n\n", "", 1) == runbook.source("en")


def test_the_page_is_self_contained_and_escapes_everything():
    md = ("# T\n\n## rule_a\n\nText <script>alert(1)</script> [x](javascript:alert(1)) [y](other.md#z) "
          "[ok](https://wiki.internal/p) [top](#rule_a) `a<b` **b&c**\n\n- one\n  more\n- two\n\n    code <x>\n")
    out = runbook.to_html(md, "t", "en")
    assert "<script" not in out and "&lt;script&gt;" in out
    assert 'href="javascript' not in out and 'href="other.md' not in out
    assert '<a href="https://wiki.internal/p">ok</a>' in out and '<a href="#rule_a">top</a>' in out
    assert '<h2 id="rule_a">' in out and "<code>a&lt;b</code>" in out and "<strong>b&amp;c</strong>" in out
    assert "<li>one more</li>" in out and "<pre><code>code &lt;x&gt;</code></pre>" in out
    page = runbook.page("en").decode()
    assert not re.search(r"<(script|link|img|iframe|style)\b", page), "the page fetches nothing and runs nothing"
    assert not re.search(r'(src|href)="(?!#|https?://)', page)


def test_the_link_function_builds_every_link_from_rule_and_language():
    assert runbook.runbook_link("http://n:9841/runbook/{lang}", "loss_nan", "zh") == "http://n:9841/runbook/zh#loss_nan"
    assert runbook.runbook_link("https://wiki/rb.md#old", "stall") == "https://wiki/rb.md#stall"
    assert runbook.runbook_link(None, "stall") is None


def test_the_default_base_is_the_daemons_own_address_and_a_configured_one_wins():
    def base(doc):
        return load_config_text(yaml.safe_dump(doc)).alerting.runbook_base()

    assert base({"http": {"listen": "10.1.2.3:9841"}}) == "http://10.1.2.3:9841/runbook/{lang}"
    assert base({"http": {"listen": "0.0.0.0:9841"}}) == f"http://{socket.gethostname()}:9841/runbook/{{lang}}"
    assert base({"http": {"listen": "[fd00::5]:9841"}}) == "http://[fd00::5]:9841/runbook/{lang}"
    assert base({"http": {"enabled": False}}) is None
    assert base({"http": {"listen": "10.1.2.3:9841"}, "alerting": {"runbook_url": "https://wiki/rb/{lang}.html"}}) \
        == "https://wiki/rb/{lang}.html"


@pytest.mark.slow
def test_the_daemon_serves_every_language_and_the_test_alert_links_a_real_section(make_daemon):
    with Receiver("slack") as slack, Receiver("webhook") as hook:
        d = make_daemon({"alerting": {"channels": [
            {"type": "slack", "name": "s", "url": slack.url, "min_severity": "info"},
            {"type": "webhook", "name": "w", "url": hook.url, "min_severity": "info"}]}})
        for lang in runbook.languages():
            status, text = http_get(f"{d.url}/runbook/{lang}")
            assert status == 200 and '<h2 id="stall">' in text, lang
        assert http_get(f"{d.url}/runbook")[1] == http_get(f"{d.url}/runbook/en")[1]
        assert http_get(f"{d.url}/runbook/xx")[0] == 404
        assert "/runbook" in http_get(f"{d.url}/")[1]  # the status page links it
        res = run_cli("test-alert", "-c", str(d.config_path))
        assert res.returncode == 0, res.stderr
        bodies = [r.json for r in slack.wait_for(1)] + [r.json for r in hook.wait_for(1)]
    links = [u for b in bodies for u in message_links(b)]
    assert any(u.endswith("/runbook/en#test_alert") for u in links), links
    assert [check_link(u) for u in links] == [None] * len(links)


class _Docs(BaseHTTPRequestHandler):
    """A local stand-in for a team's wiki: serves the runbook pages at /rb/<lang>.html."""

    def do_GET(self):  # noqa: N802
        m = re.fullmatch(r"/rb/([a-z-]+)\.html", self.path)
        body = runbook.page(m.group(1)) if m and m.group(1) in runbook.languages() else None
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *a):
        pass


def test_a_configured_external_base_wins_and_its_links_work():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Docs)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}/rb/{{lang}}.html"
        with Receiver("feishu") as rx:
            from watchdog.alerting.deliver.channels import build_channel

            cfg = load_config_text(yaml.safe_dump({"alerting": {"runbook_url": base, "channels": [
                {"type": "feishu", "name": "f", "url": rx.url, "min_severity": "info"}]}}))
            ch = build_channel(cfg.alerting.channels[0], cfg.alerting)
            body = {"kind": "firing", "status": "firing", "ikey": "k", "created": 0.0,
                    "group": {"host": "n", "training_job": "j"},
                    "alerts": [{"fp": "1", "rule": "log_oom", "severity": "critical", "status": "firing",
                                "summary": "oom", "labels": {"host": "n", "training_job": "j", "rank": "3"},
                                "hint": "", "value": None, "since": 1.0, "starts_at": 1.0, "ends_at": None,
                                "evidence": [], "snapshot": None, "dashboard": None}]}
            assert ch.deliver(body).ok
            [req] = rx.wait_for(1)
        links = message_links(req.json)
        assert links and all(u.startswith(base.replace("{lang}", "en")) for u in links), links
        assert [check_link(u) for u in links] == [None] * len(links)
    finally:
        srv.shutdown()
        srv.server_close()


def test_every_dashboard_link_we_show_uses_the_shipped_dashboards_uid_and_variables():
    """A dashboard link with another uid, or a variable the dashboard lacks, opens a 404 or an
    unfiltered board: the example config and the docs must use the shipped one's."""
    board = json.loads((REPO / "contrib" / "grafana" / "npu-watchdog.json").read_text())
    variables = {v["name"] for v in board["templating"]["list"]}
    pages = [REPO / "config" / "npu-watchdog.example.yaml", REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = []
    for page in pages:
        for m in re.finditer(r"https?://[^\s\"'`]+/d/([A-Za-z0-9_-]+)[^\s\"'`]*", page.read_text(encoding="utf-8")):
            found.append((page.name, m.group(1)))
            assert m.group(1) == board["uid"], f"{page.name}: dashboard uid {m.group(1)!r}, shipped {board['uid']!r}"
            for var in re.findall(r"var-([A-Za-z0-9_]+)=", m.group(0)):
                assert var in variables, f"{page.name}: var-{var} is not a variable of the dashboard"
    assert ("npu-watchdog.example.yaml", board["uid"]) in found

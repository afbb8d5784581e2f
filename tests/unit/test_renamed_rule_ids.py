"""A removed shipped log rule id in a user's config (`disable`, a channel's or a silence's
`log_rule` matcher) keeps validating: it means its successor, said in one warning line."""

from __future__ import annotations

import logging

import pytest

from tests.helpers import logged

from watchdog.config.load import load_config_text
from watchdog.config.sections.alerting import parse_matcher

OLD_CONFIG = """
probes:
  logs:
    disable: [oom_host_sigkill]
alerting:
  channels:
    - name: ops
      type: webhook
      url: http://127.0.0.1:9/hook
      matchers: ["log_rule!=oom_host_sigkill"]
"""


@pytest.fixture
def warned():
    """The config logger's warnings (tests.helpers.logged: a handler of its own)."""
    with logged("watchdog.config", logging.WARNING) as records:
        yield records


def _warnings(warned, old):
    return [r.getMessage() for r in warned if old in r.getMessage()]


def test_disabling_oom_host_sigkill_disables_launcher_killed_with_one_warning(warned):
    cfg = load_config_text(OLD_CONFIG)
    logs = cfg.probes.logs
    assert logs.disable == ["launcher_killed"]
    assert "launcher_killed" not in {r.id for r in logs.ruleset()}
    (matcher,) = cfg.alerting.channels[0].matchers
    assert (matcher.name, matcher.op, matcher.value) == ("log_rule", "!=", "launcher_killed")
    said = _warnings(warned, "oom_host_sigkill")
    assert len([w for w in said if w.startswith("probes.logs.disable")]) == 1, said
    assert len([w for w in said if w.startswith("matcher log_rule!=")]) == 1, said
    assert all("launcher_killed" in w for w in said)


def test_a_silence_matcher_naming_the_old_id_matches_the_successor(warned):
    m = parse_matcher("log_rule=oom_host_sigkill")
    assert m.matches({"log_rule": "launcher_killed"}) and not m.matches({"log_rule": "oom_host_sigkill"})
    assert len(_warnings(warned, "oom_host_sigkill")) == 1
    # Other labels and regexes are left as written.
    assert parse_matcher("rule=oom_host_sigkill").value == "oom_host_sigkill"
    assert parse_matcher("log_rule=~oom_host_.*").value == "oom_host_.*"

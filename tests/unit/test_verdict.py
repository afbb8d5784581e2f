"""A verdict on every page: the domain and whether a restart helps, derived from the cause."""

from __future__ import annotations

import pytest

from tests.helpers import TESTS
from watchdog.core.findings import Finding
from watchdog.core.verdict import DOMAINS, RESTART, is_interruption, verdict_of
from watchdog.detectors import with_verdict
from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset
from watchdog.words import words as load_words


@pytest.mark.parametrize("rule, labels, details, domain, restart", [
    ("log_oom", {"log_rule": "oom_torch_npu"}, {}, "memory", "no"),
    ("log_hccl", {"log_rule": "hccl_notify_wait_timeout"}, {}, "network", "helps"),
    ("log_device", {"log_rule": "code_acl_device"}, {}, "hardware", "may_help"),
    ("log_device", {"log_rule": "device_aicore_exception"}, {}, "user_code", "no"),
    ("log_hccl", {"log_rule": "hccl_collective_mismatch"}, {}, "user_code", "no"),  # ranks took different paths
    # an Ascend chip fault code on the line: the vendor's handling level decides the restart
    ("log_device", {"log_rule": "code_chipfault_device"}, {"code": {"level": "SeparateNPU"}}, "hardware", "no"),
    ("log_device", {"log_rule": "device_hbm_ecc"}, {"code": {"level": "RestartBusiness"}}, "hardware", "helps"),
    ("log_hccl", {"log_rule": "code_chipfault_hccl"}, {"code": {"level": "RestartRequest"}}, "network", "may_help"),
    ("log_hccl", {"log_rule": "code_chipfault_hccl"}, {"code": {"level": "NotHandleFault"}}, "network", "helps"),
    ("log_device", {"log_rule": "code_acl_device"}, {"code": {"level": ""}}, "hardware", "may_help"),
    ("log_nan", {"log_rule": "fp16_loss_scale_collapse"}, {}, "numerics", "no"),
    ("log_traceback", {"log_rule": "launcher_killed"}, {}, "unknown", "may_help"),
    ("kernel_oom", {}, {}, "memory", "no"),
    ("job_gone", {}, {"verdict": {"row": "failure_line"},
                      "evidence": {"failure_line": "oom_torch_npu: RuntimeError: NPU out of memory"}}, "memory", "no"),
    ("job_gone", {}, {"verdict": {"row": "failure_line"},
                      "evidence": {"failure_line": "launcher_killed: mpirun noticed ... signal 9 (Killed)."}},
     "unknown", "may_help"),
    ("job_gone", {}, {"verdict": {"row": "exit_status"},
                      "evidence": {"first_exit": "rank 1 (pid 7) segmentation fault (signal 11)"}}, "user_code", "may_help"),
    ("rank_missing", {}, {}, "unknown", "may_help"),
    ("stall", {}, {}, "unknown", "may_help"),
])
def test_the_verdict_follows_the_cause(rule, labels, details, domain, restart):
    v = verdict_of(rule, labels, details)
    assert (v.domain, v.restart) == (domain, restart) and v.domain in DOMAINS and v.restart in RESTART


def test_interruptions_carry_the_verdict_as_labels_others_in_details_info_none():
    f = with_verdict(Finding(rule="log_oom", severity="critical", summary="s", labels={"log_rule": "oom_cuda"}))
    assert f.labels["domain"] == "memory" and f.labels["restart"] == "no" and f.details["interruption"]["cause"] == "oom_cuda"
    g = with_verdict(Finding(rule="stall", severity="critical", summary="s", labels={}))
    assert "domain" not in g.labels and g.details["interruption"]["domain"] == "unknown" and not is_interruption("stall")
    assert with_verdict(Finding(rule="job_finished", severity="info", summary="s", labels={})).details == {}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_domain_and_restart_is_worded_in_both_languages(lang):
    w = load_words(lang)
    for d in DOMAINS:
        for r in RESTART:
            line = w.t("verdict_line", domain=w.t(f"domain_{d}"), restart=w.t(f"restart_{r}"))
            assert f"domain_{d}" not in line and f"restart_{r}" not in line and "{" not in line, line


def test_scan_report_shows_the_domains_and_the_unknown_share():
    """What `npu-watchdog scan --report` prints (corpus.render) over the held-out set."""
    rep = corpus.score(corpus.load(sorted((TESTS / "samples" / "holdout").glob("*.log"))), build_ruleset())
    out = corpus.render(rep, ())
    assert "| verdict domain | failure lines | share |" in out
    for d in DOMAINS:
        assert f"| {d} |" in out
    assert sum(rep.domains.values()) == rep.failure_lines and "Unknown share:" in out


def test_a_job_end_names_the_category_of_every_shipped_rule():
    """A job end's cause is `rule: line`; its category is read back from the rule id, for every
    shipped rule (the generic ones, `traceback_generic` among them, included)."""
    from watchdog.core.verdict import _category_of_log_rule

    wrong = {r.id: r.category for r in build_ruleset() if _category_of_log_rule(r.id) != r.category}
    assert not wrong, wrong

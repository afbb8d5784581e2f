"""The doctor's pure parts: version parsers, compatibility rules, device and environment
verdicts, smoke evaluation, record comparison."""

from __future__ import annotations

import pytest

from tests.helpers import TESTS
from watchdog.config import load_config_text
from watchdog.config.load import ConfigError
from watchdog.config.sections.doctor import default_env_rules
from watchdog.doctor import envcheck
from watchdog.doctor.devices import check_devices
from watchdog.doctor.model import CheckResult, Report
from watchdog.doctor.report import compare_records
from watchdog.doctor.smokecheck import evaluate_smoke, parse_smoke_output
from watchdog.doctor.versions import (
    VersionFacts,
    base_version,
    check_versions,
    load_compat,
    normalize_cann,
    parse_cann_version,
    parse_version_info,
)
from watchdog.npusmi.parse import parse_info

CAPTURES = TESTS / "fixtures" / "npu-smi"


def by_id(results, cid):
    found = [r for r in results if r.id == cid]
    assert found, [r.id for r in results]
    return found[0]


# --- version files ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("# version: 1.0\nruntime_running_version=[7.5.0.1.129:8.0.RC3]\ncompiler_running_version=[7.5.0.1.129:8.0.RC3]\n", "8.0.RC3"),
    ("runtime_running_version=[1.84.15.1.310:6.0.1]\ntoolkit_running_version=[1.84.15.1.310:6.0.1]\n", "6.0.1"),
    ("# version: 1.0\nruntime_running_version=[7.6.T13.0.B094:8.0.T63]\n", "8.0.T63"),
    ("runtime_running_version=[1.83.T8.0.B128:CANN-1.83]\n", "1.83"),
    ("package_name=Ascend-cann-toolkit\nversion=8.0.RC3\ninnerversion=V100R001C19SPC001\n", "8.0.RC3"),
    ("nothing useful here\n", None),
])
def test_parse_cann_version(text, expected):
    assert parse_cann_version(text) == expected


def test_firmware_from_real_board_capture():
    from watchdog.doctor.gather import firmware_from_board

    assert firmware_from_board((CAPTURES / "info_t_board_910B3_25.5.1.txt").read_text()) == "7.7.0.6.236"
    assert firmware_from_board("NPU ID : 0\nFirmware Version : NA\n") is None


def test_parse_driver_version_info():
    text = "Version=24.1.rc1\nascendhal_version=7.35.19\naicpu_version=1.0\nInnerversion=V100R001C17SPC001B213\n"
    assert parse_version_info(text) == "24.1.rc1"
    assert parse_version_info("ascendhal_version=7.35.19\n") is None


def test_version_helpers():
    assert base_version("2.1.0.post3") == "2.1.0"
    assert base_version("2.1.0+cpu") == "2.1.0"
    assert base_version("2.5.1rc1") == "2.5.1"
    assert normalize_cann("8.0.RC3.beta1") == "8.0.RC3"
    assert normalize_cann("CANN 8.0.rc3") == "8.0.RC3"


def test_compat_data_cites_every_source():
    compat = load_compat()
    sources = compat["sources"]
    for sid, src in sources.items():
        assert src["url"].startswith("https://"), sid
    assert compat["torch_npu_requires_same_torch"]["source"] in sources
    assert compat["torch_npu_requires_same_torch"]["status"] == "fail"
    assert all(s in sources for s in compat["torch_npu_cann"]["sources"])
    assert compat["torch_python"]["source"] in sources
    for tnpu in compat["torch_npu_cann"]["releases"]:
        assert base_version(tnpu), tnpu


def test_versions_fail_only_on_the_cited_rule():
    facts = VersionFacts(npu_smi="23.0.6", driver="23.0.6", cann="8.0.RC3", python="3.10.12",
                         torch="2.1.0", torch_npu="2.1.0.post8", interpreter="/x/python")
    res = check_versions(facts)
    assert [r.status for r in res if r.status in ("fail", "warn")] == []
    facts.torch = "2.2.0"
    res = check_versions(facts)
    assert [r.id for r in res if r.status == "fail"] == ["versions.torch_torch_npu"]
    # An unknown combination is only a warning showing both versions.
    facts.torch, facts.torch_npu, facts.cann = "9.9.0", "9.9.0", "99.0.0"
    res = check_versions(facts)
    tc = by_id(res, "versions.torch_npu_cann")
    assert tc.status == "warn" and "torch_npu 9.9.0" in tc.reason and "cann 99.0.0" in tc.reason
    assert not [r for r in res if r.status == "fail"]


def test_python_not_listed_for_torch_warns():
    facts = VersionFacts(python="3.12.1", torch="2.1.0", torch_npu="2.1.0.post8", cann="8.0.RC3",
                         interpreter="/x/python")
    r = by_id(check_versions(facts), "versions.python_torch")
    assert r.status == "warn" and "3.12" in r.reason


def test_driver_and_npu_smi_disagree():
    facts = VersionFacts(npu_smi="25.2.0", driver="24.1.rc1")
    r = by_id(check_versions(facts), "versions.driver_npu_smi")
    assert r.status == "warn" and "24.1.rc1" in r.reason and "25.2.0" in r.reason


# --- devices on real captures ----------------------------------------------------------------

def test_devices_on_real_capture_with_a_process():
    obs = parse_info((CAPTURES / "info_910B3_8card_25.2.0_procs.txt").read_text())
    res = check_devices(obs, expected=8, min_free_hbm_ratio=0.85)
    assert by_id(res, "devices.count").status == "pass"
    procs = by_id(res, "devices.processes")
    assert procs.status == "fail" and "pid 1333928" in procs.reason and "NPU 2" in procs.reason
    assert by_id(res, "devices.free_memory").status == "warn"  # 41052 of 65536 MB used on NPU 2
    # The same process belongs to the job being checked: fine.
    res = check_devices(obs, expected=8, min_free_hbm_ratio=0.85, job_pids=[1333928])
    assert by_id(res, "devices.processes").status == "pass"


def test_devices_warning_health_on_real_capture():
    obs = parse_info((CAPTURES / "info_910_8card_24.1.RC2_Warning_procs.txt").read_text())
    res = check_devices(obs, expected=None, min_free_hbm_ratio=0.0)
    health = by_id(res, "devices.health")
    assert health.status == "warn"
    assert "NPU 3" in health.reason and "NPU 7" in health.reason


def test_devices_a3_counts_dies():
    obs = parse_info((CAPTURES / "info_910_A3_16die_24.1.rc3.5_idle.txt").read_text())
    assert by_id(check_devices(obs, 16, 0.5), "devices.count").status == "pass"
    assert by_id(check_devices(obs, 17, 0.5), "devices.count").status == "fail"


def test_devices_without_hbm_use_ddr():
    obs = parse_info((CAPTURES / "info_310P3_Duo_4card_25.3.rc1.txt").read_text())
    res = check_devices(obs, None, 0.5)
    assert by_id(res, "devices.free_memory").status in ("pass", "warn")


# --- environment -----------------------------------------------------------------------------

def test_parse_env_file_shapes():
    env = envcheck.parse_env_file(
        "# comment\nexport A=1\nB='two words'\nC=\"x:y,z:w\"  # trailing\nnot an assignment\npython train.py\nD=\n")
    assert env == {"A": "1", "B": "two words", "C": "x:y,z:w", "D": ""}


def test_parse_environ_bytes():
    assert envcheck.parse_environ(b"A=1\0B=x=y\0junk\0") == {"A": "1", "B": "x=y"}


@pytest.mark.parametrize("value,status", [("0", "warn"), ("1", "warn"), ("2", "pass"), ("3", "pass")])
def test_log_level_rule(value, status):
    res = envcheck.check_rules({"ASCEND_GLOBAL_LOG_LEVEL": value}, default_env_rules())
    assert by_id(res, "env.ASCEND_GLOBAL_LOG_LEVEL").status == status


@pytest.mark.parametrize("value,status,text", [
    (None, "pass", "30m36s"),
    ("1800", "pass", "30m"),
    ("300", "warn", "5m"),
    ("0", "warn", "never"),
    ("abc", "warn", "not a number"),
])
def test_hccl_exec_timeout(value, status, text):
    env = {} if value is None else {"HCCL_EXEC_TIMEOUT": value}
    r = by_id(envcheck.check_hccl_timeouts(env, 600), "env.HCCL_EXEC_TIMEOUT")
    assert r.status == status and text in r.reason


@pytest.mark.parametrize("value,present,expected,status", [
    (None, 8, 8, "pass"),
    ("0,1,2,3", 8, 4, "pass"),
    ("0,1,2,3", 8, 8, "warn"),
    ("0,1,8", 8, None, "fail"),
    ("0,0,1", 8, None, "fail"),
    ("a,b", 8, None, "fail"),
    ("0,1", None, None, "skipped"),
])
def test_visible_devices(value, present, expected, status):
    env = {} if value is None else {"ASCEND_RT_VISIBLE_DEVICES": value}
    assert envcheck.check_visible_devices(env, present, expected).status == status


def test_alloc_conf():
    assert "expandable_segments:True" in envcheck.check_alloc_conf({}).advice
    assert envcheck.check_alloc_conf({"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}).advice == ""
    assert envcheck.check_alloc_conf({"PYTORCH_NPU_ALLOC_CONF": "expandable_segments"}).status == "warn"


def test_key_environment_keeps_no_secrets():
    env = {"ASCEND_GLOBAL_LOG_LEVEL": "3", "HOME": "/root", "HCCL_SECRET_TOKEN": "s3cr3t",
           "ASCEND_CUSTOM": "x", "WEBHOOK_URL": "https://example.invalid/hook"}
    assert envcheck.key_environment(env) == {"ASCEND_CUSTOM": "x", "ASCEND_GLOBAL_LOG_LEVEL": "3"}


def test_env_rules_are_config_data():
    cfg = load_config_text("doctor:\n  env_rules:\n    - var: MY_FLAG\n      pattern: 'on'\n      status: fail\n"
                           "      reason: '{var} is {value}'\n")
    res = envcheck.check_rules({"MY_FLAG": "ON"}, cfg.doctor.env_rules)
    assert res[0].status == "fail" and res[0].reason == "MY_FLAG is ON"
    with pytest.raises(ConfigError, match=r"doctor\.env_rules\[0\]\.pattern: invalid regular expression"):
        load_config_text("doctor:\n  env_rules:\n    - {var: X, pattern: '(', reason: r}\n")


# --- smoke -----------------------------------------------------------------------------------

def _dev(index=0, cos=0.99999, err=1e-5, **kw):
    d = {"index": index, "matmul": {"cosine": cos, "max_abs_err": err},
         "layer": {"cosine": 0.99999, "max_abs_err": 2e-5}, "seconds": 0.8}
    d.update(kw)
    return d


def test_smoke_thresholds():
    ok = evaluate_smoke({"importable": True, "devices": [_dev(0), _dev(1)]}, 0.999, 1e-3, expected=2)
    assert [r.status for r in ok] == ["pass", "pass", "pass"]
    assert "0.80s" in ok[1].reason
    bad_cos = evaluate_smoke({"importable": True, "devices": [_dev(0, cos=0.9989)]}, 0.999, 1e-3)
    assert bad_cos[-1].status == "fail" and "cosine" in bad_cos[-1].reason
    bad_err = evaluate_smoke({"importable": True, "devices": [_dev(0, err=2e-3)]}, 0.999, 1e-3)
    assert bad_err[-1].status == "fail" and "max abs err" in bad_err[-1].reason
    nan = evaluate_smoke({"importable": True, "devices": [_dev(0, cos=float("nan"))]}, 0.999, 1e-3)
    assert nan[-1].status == "fail"
    broken = evaluate_smoke({"importable": True, "devices": [{"index": 3, "error": "RuntimeError: EL0004"}]}, 0.999, 1e-3)
    assert broken[-1].status == "fail" and "EL0004" in broken[-1].reason
    fewer = evaluate_smoke({"importable": True, "devices": [_dev(0)]}, 0.999, 1e-3, expected=8)
    assert any(r.status == "warn" for r in fewer)


def test_smoke_output_with_banner_noise():
    out = "CANN banner\nWarning: something\n{\"importable\": false, \"reason\": \"x\"}\n"
    assert parse_smoke_output(out) == {"importable": False, "reason": "x"}
    with pytest.raises(ValueError):
        parse_smoke_output("no json at all\n")


# --- report ----------------------------------------------------------------------------------

def test_exit_codes():
    r = Report()
    r.add(CheckResult("g", "a", "pass", "ok"))
    r.add(CheckResult("g", "b", "skipped", "n/a"))
    assert r.exit_code() == 0
    r.add(CheckResult("g", "c", "warn", "hm"))
    assert r.exit_code() == 1 and r.exit_code(warn_exit=0) == 0
    r.add(CheckResult("g", "d", "fail", "no"))
    assert r.exit_code(warn_exit=0) == 2
    with pytest.raises(ValueError):
        CheckResult("g", "e", "bogus", "x")


def test_compare_records():
    a = {"host": "n1", "versions": {"cann": "8.0.RC3", "torch": "2.1.0"}, "environment": {"A": "1"},
         "cards": [{"npu": 0, "chip": 0, "health": "OK"}, {"npu": 1, "chip": 0, "health": "OK"}],
         "checks": [{"id": "x.y", "status": "pass"}]}
    b = {"host": "n1", "versions": {"cann": "8.1.RC1", "torch": "2.1.0"}, "environment": {"B": "2"},
         "cards": [{"npu": 0, "chip": 0, "health": "Alarm"}],
         "checks": [{"id": "x.y", "status": "fail"}]}
    diffs = compare_records(a, b)
    assert ("versions", "cann", "8.0.RC3", "8.1.RC1") in diffs
    assert ("environment", "A", "1", None) in diffs and ("environment", "B", None, "2") in diffs
    assert ("cards", "NPU 0 chip 0 health", "OK", "Alarm") in diffs
    assert ("cards", "NPU 1 chip 0", "present", "absent") in diffs
    assert ("checks", "x.y", "pass", "fail") in diffs
    assert compare_records(a, a) == []


# -- the installed unit's PrivateTmp against heartbeat and log paths under /tmp ----------------
def test_private_tmp_with_paths_under_tmp_is_a_warning_naming_them(tmp_path):
    from tests.helpers import REPO
    from watchdog.doctor.gather import read_unit
    from watchdog.doctor.unitcheck import check_private_tmp

    unit = tmp_path / "npu-watchdog.service"
    unit.write_text((REPO / "systemd" / "npu-watchdog.service").read_text())  # the shipped unit
    found = read_unit([str(tmp_path / "absent.service"), str(unit)])
    r = check_private_tmp(found, ["/tmp/hb/rank*.json"], ["/data/job/logs/*.log"])
    assert r.status == "warn" and "/tmp/hb/rank*.json" in r.reason and "PrivateTmp=no" in r.advice
    assert check_private_tmp(found, ["/data/hb/*.json"], []).status == "pass"
    # a drop-in that turns it off wins (systemctl edit)
    (tmp_path / "npu-watchdog.service.d").mkdir()
    (tmp_path / "npu-watchdog.service.d" / "override.conf").write_text("[Service]\nPrivateTmp=no\n")
    assert check_private_tmp(read_unit([str(unit)]), ["/tmp/hb/*.json"], []).status == "pass"
    assert check_private_tmp(None, ["/tmp/x"], []).status == "skipped"

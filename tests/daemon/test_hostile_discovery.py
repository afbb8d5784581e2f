"""Another user's process cannot blind discovery: values it puts in its environment are parsed
as ASCII digits within bounds, and a process that cannot be made sense of is skipped, counted and
never fails the scan (real processes running as an unprivileged user)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, wait_for
from tests.hostile_kit import as_other_user
from tests.jobkit import TAG, TrainJob
from watchdog.discovery.environ import first_int
from watchdog.discovery.scan import hccl_of, npu_of
from watchdog.parse.hccl import from_env
from watchdog.parse.untrusted import ascii_int, ascii_number

HOSTILE = ("²", "١٢", "٩٩٩", "1²", "+1", "-1", " 3 ", "0x10", "1e3", "nan", "12345678901234567890")


def test_only_ascii_digits_within_bounds_are_numbers():
    assert [ascii_int(v) for v in HOSTILE] == [None, None, None, None, None, None, 3, None, None, None, None]
    assert ascii_number("120") == 120.0 and ascii_number("1.5") == 1.5
    assert all(ascii_number(v) is None for v in ("١٢٠", "inf", "nan", "1e3", "-5", "²"))
    for v in HOSTILE:
        env = {"RANK": v, "LOCAL_RANK": v, "ASCEND_RT_VISIBLE_DEVICES": f"{v},{v}", "HCCL_CONNECT_TIMEOUT": v,
               "HCCL_EXEC_TIMEOUT": v}
        first_int(env, ("RANK",))  # never raises
        npu_of(env, 0)
        hccl_of([env])
        from_env([env])
    assert npu_of({"ASCEND_RT_VISIBLE_DEVICES": "٣,²"}, 0) is None
    assert hccl_of([{"HCCL_CONNECT_TIMEOUT": "٩٩٩"}]).connect_timeout_s == 120  # the CANN default
    assert from_env([{"HCCL_CONNECT_TIMEOUT": "٩٩٩"}]) is None


def _hostile(procs, tag, **env):
    base = {"PATH": "/usr/bin:/bin", TAG: tag}
    return procs(["sleep", "600"], env={**base, **env}, preexec_fn=as_other_user)


def test_another_users_unicode_digits_never_fail_discover(tmp_path, procs):
    """Fails on the code before the fix: `discover` exited 2 (ValueError from int('²'))."""
    cfg = tmp_path / "c.yaml"
    with TrainJob(tmp_path / "job", ranks=2) as job:
        bad = [_hostile(procs, job.tag, RANK="²", LOCAL_RANK="²", ASCEND_RT_VISIBLE_DEVICES="²",
                        HCCL_CONNECT_TIMEOUT="²"),
               _hostile(procs, job.tag, RANK="7", LOCAL_RANK="²", ASCEND_RT_VISIBLE_DEVICES="0,²",
                        HCCL_CONNECT_TIMEOUT="٩٩٩", HCCL_EXEC_TIMEOUT="²")]
        wait_for(lambda: all(open(f"/proc/{p.pid}/cmdline", "rb").read().startswith(b"sleep") for p in bad),
                 what="the hostile processes exec'd")
        cfg.write_text(f"discovery:\n  enabled: true\n  only_env: '{job.only_env}'\n")
        out = subprocess.run([sys.executable, "-m", "watchdog", "discover", "--json", "-c", str(cfg)],
                             capture_output=True, text=True, cwd=str(REPO), timeout=60)
        assert out.returncode == 0, out.stderr
        jobs = json.loads(out.stdout)["jobs"]
        ranks = {r["pid"]: r for j in jobs for r in j["ranks"]}
        good = [j for j in jobs if any(r["rank"] in (0, 1) and r["pid"] not in (bad[0].pid, bad[1].pid)
                                       for r in j["ranks"])]
        assert good and sum(len(j["ranks"]) for j in good) >= 2  # the real job is still there
        assert bad[0].pid not in ranks  # RANK=² is no rank at all
        seven = ranks[bad[1].pid]  # RANK=7 is a rank; its other values are as if unset
        assert seven["rank"] == 7 and seven["local_rank"] is None and seven["npu"] is None
        hostile_job = next(j for j in jobs if any(r["pid"] == bad[1].pid for r in j["ranks"]))
        assert hostile_job["hccl"]["connect_timeout_s"] == 120


@pytest.mark.slow
def test_another_users_hostile_process_does_not_blind_the_daemon(tmp_path, procs, make_daemon):
    """The daemon with discovery: another user's `env RANK=² ...` process runs beside a real job.
    Fails on the code before the fix: every scan failed (the process probe down, no log followed),
    so the real job's failure line was never detected."""
    job = TrainJob(tmp_path / "job", ranks=2, env={"NPU_WATCHDOG_JOB": "real-job"})
    d = make_daemon({"job": {}, "discovery": {"enabled": True, "only_env": job.only_env, "interval": "1s"},
                     "probes": {"process": {"interval": "1s"}, "logs": {"interval": "1s", "rescan": "1s"}}})
    with job:
        bad = _hostile(procs, job.tag, RANK="²", LOCAL_RANK="²", ASCEND_RT_VISIBLE_DEVICES="²",
                       HCCL_CONNECT_TIMEOUT="²")
        seven = _hostile(procs, job.tag, RANK="7", LOCAL_RANK="²", ASCEND_RT_VISIBLE_DEVICES="²",
                         HCCL_EXEC_TIMEOUT="١٢٠")
        wait_for(lambda: all(open(f"/proc/{p.pid}/cmdline", "rb").read().startswith(b"sleep") for p in (bad, seven)),
                 what="the hostile processes exec'd")
        wait_for(lambda: d.metrics().get('npu_watchdog_discovered_ranks{training_job="real-job"}') == 2,
                 timeout=30, what="the real job discovered")
        wait_for(lambda: any(p["name"] == "logs" and (p["last_result"] or "").startswith("2 files")
                             for p in d.status()["probes"]), timeout=30, what="the real job's logs followed")
        job.nan(1)
        found = wait_for(lambda: [f for f in d.status()["findings"] if f["rule"] == "log_nan"], timeout=30,
                         what="the real job's NaN line detected")
        assert found[0]["labels"]["training_job"] == "real-job"
        probes = {p["name"]: p for p in d.status()["probes"]}
        assert probes["process"]["up"] and probes["process"]["errors_total"] == 0, probes["process"]
        assert d.metrics().get("npu_watchdog_discovery_errors_total") == 0


def test_heartbeat_numbers_written_as_text_are_ascii_only():
    from watchdog.parse.heartbeat_format import HeartbeatFormatError, parse_heartbeat

    assert parse_heartbeat(b'{"step": "12", "loss": "nan"}').step == 12
    for bad in (b'{"step": "\xd9\xa1\xd9\xa2"}', b'{"step": "\xc2\xb2"}', b'{"loss": "\xd9\xa1\xd9\xa2"}'):
        with pytest.raises(HeartbeatFormatError):
            parse_heartbeat(bad)

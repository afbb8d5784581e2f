"""Failure snapshots against real processes, real files and real archives (no daemon here).

The daemon and CLI paths are in test_snapshot_daemon.py.
"""

from __future__ import annotations

import json
import os
import stat
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from pydantic import SecretStr

from tests.helpers import FIXTURES, wait_for
from watchdog.config.schema import Config
from watchdog.core.findings import Finding
from watchdog.observations import NpuChip, NpuObservation, ProcessInfo, ProcessObservation
from watchdog.runtime import Runtime
from watchdog.snapshots import build_snapshot_taker
from watchdog.snapshots.policy import wants_snapshot
from watchdog.snapshots.procs import resolve_py_spy
from watchdog.privacy.redact import REDACTED
from watchdog.snapshots.retention import apply_retention
from watchdog.snapshots.taker import SnapshotTaker, manual_finding
from watchdog.core.state import StateStore

BUSY = textwrap.dedent("""
    import sys
    def spin_in_named_function_for_snapshot_test(marker):
        open(marker, "w").close()
        x = 0
        while True:
            x += 1
    spin_in_named_function_for_snapshot_test(sys.argv[1])
""")

SLEEPER = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[1], "w").write(str(child.pid))
    time.sleep(600)
""")


def raw_config(tmp: Path, **snapshots: Any) -> Dict[str, Any]:
    return {
        "node": {"name": "node-s"},
        "job": {"name": "job-s"},
        "paths": {"state_dir": str(tmp / "state"), "snapshot_dir": str(tmp / "snaps")},
        "snapshots": {"enabled": True, "min_free_space": "1MiB", "dmesg_lines": 20, **snapshots},
    }


def config(tmp: Path, **snapshots: Any) -> Config:
    return Config.model_validate(raw_config(tmp, **snapshots))


def with_logs(cfg: Config, *paths: str) -> Config:
    return cfg.model_copy(update={"probes": cfg.probes.model_copy(update={
        "logs": cfg.probes.logs.model_validate({"sources": [{"name": "train", "paths": list(paths)}]})})})


def runtime(cfg: Config, pids: Dict[int, Optional[int]] = None, npu: Optional[NpuObservation] = None) -> Runtime:
    state = StateStore()
    if pids:
        procs = tuple(ProcessInfo(pid=p, rank=r, state="running", create_time=0.0, cpu_seconds=0.0,
                                  cpu_delta=None, rss_bytes=0, threads=1) for p, r in pids.items())
        state.put("process", ProcessObservation(processes=procs))
    if npu is not None:
        state.put("npu", npu)
    return Runtime(config=cfg, state=state, engine=None)


def finding(rule: str = "stall", severity: str = "critical", **labels: str) -> Finding:
    return Finding(rule=rule, severity=severity, summary=f"{rule} test", labels={"host": "node-s", "training_job": "job-s", **labels})


def start(tmp: Path, code: str, name: str, env: Optional[Dict[str, str]] = None,
          args: Tuple[str, ...] = ()) -> Tuple[subprocess.Popen, Path]:
    script = tmp / f"{name}.py"
    script.write_text(code)
    marker = tmp / f"{name}.ready"
    proc = subprocess.Popen([sys.executable, str(script), str(marker), *args], env=env)
    wait_for(lambda: marker.exists() and proc.poll() is None, timeout=20, what=f"{name} to start")
    return proc, marker


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def extract(archive: str, into: Path) -> Tuple[Path, Dict[str, Any]]:
    with tarfile.open(archive) as tar:
        tar.extractall(into)
    top = into / os.path.basename(archive)[: -len(".tar.gz")]
    return top, json.loads((top / "manifest.json").read_text())


def item(manifest: Dict[str, Any], name: str) -> Dict[str, Any]:
    return next(i for i in manifest["items"] if i["name"] == name)


def wait_archive(path: str) -> str:
    wait_for(lambda: os.path.exists(path), timeout=60, what=f"archive {path}")
    return path


def need_py_spy() -> str:
    prog = resolve_py_spy("py-spy")
    if prog is None:
        pytest.skip("py-spy is not installed (pip install 'npu-watchdog[dev]')")
    return prog


# -- stacks and process state of real processes ----------------------------------------------------

def test_busy_process_python_stack_names_the_function(tmp_path):
    need_py_spy()
    proc, _ = start(tmp_path, BUSY, "busy")
    try:
        cfg = config(tmp_path)
        taker = SnapshotTaker(cfg, runtime(cfg, {proc.pid: 0}))
        path = taker.request(finding())
        assert path and path.startswith(str(tmp_path / "snaps"))
        assert os.path.basename(path).endswith("-node-s-stall.tar.gz")
        wait_archive(path)
        taker.close()
    finally:
        stop(proc)
    top, manifest = extract(path, tmp_path / "x")
    spy = item(manifest, f"stacks:py-spy:{proc.pid}")
    if spy["problems"] and spy["problems"][0]["reason"] == "permission_denied":
        pytest.skip(f"py-spy cannot attach here (ptrace restricted): {spy['problems'][0]['message']}")
    assert spy["status"] == "ok", spy
    dump = (top / f"stacks/py-spy-{proc.pid}.txt").read_text()
    assert "spin_in_named_function_for_snapshot_test" in dump
    tree = json.loads((top / "processes/tree.json").read_text())
    me = next(r for r in tree if r["pid"] == proc.pid)
    assert me["root"] is True and me["rank"] == 0 and me["threads"] >= 1 and me["open_files"] >= 3
    assert any("busy.py" in a for a in me["cmdline"])
    assert manifest["trigger"]["finding"]["rule"] == "stall"
    assert manifest["host"] == "node-s" and manifest["daemon"]["version"]
    assert manifest["complete"] is True
    # Owner-only permissions: the archive file and every member.
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "snaps").st_mode) == 0o700
    with tarfile.open(path) as tar:
        assert all(m.mode & 0o077 == 0 for m in tar.getmembers())


def test_sleeping_process_tree_state_and_kernel_stack(tmp_path):
    proc, marker = start(tmp_path, SLEEPER, "sleeper")
    child_pid = int(wait_for(lambda: marker.read_text().strip(), what="child pid"))
    try:
        # Wait until both really sleep in the kernel (not still starting up).
        wait_for(lambda: all(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] == "S"
                             for p in (proc.pid, child_pid)), what="processes asleep")
        cfg = config(tmp_path)
        taker = SnapshotTaker(cfg, runtime(cfg, {proc.pid: 3}))
        adm = taker.take(finding("rank_disk_sleep"))
    finally:
        stop(proc)
        try:
            os.kill(child_pid, 9)
        except ProcessLookupError:
            pass
    top, manifest = extract(adm.path, tmp_path / "x")
    tree = {r["pid"]: r for r in json.loads((top / "processes/tree.json").read_text())}
    assert tree[proc.pid]["state"] == "sleeping" and tree[proc.pid]["rank"] == 3
    assert tree[child_pid]["root"] is False and tree[child_pid]["ppid"] == proc.pid
    kernel = (top / f"stacks/kernel-{proc.pid}.txt").read_text()
    assert "State:\tS (sleeping)" in kernel
    k_item = item(manifest, "stacks:kernel")
    if os.geteuid() == 0 and k_item["status"] == "ok":
        assert "nanosleep" in kernel or "poll" in kernel or "wait" in kernel, kernel
    else:
        assert any(p["reason"] == "permission_denied" for p in k_item["problems"]), k_item
    # The descendant is a Python process too: its stack is attempted.
    assert any(i["name"] == f"stacks:py-spy:{child_pid}" for i in manifest["items"])


def test_py_spy_absent_is_recorded(tmp_path):
    proc, _ = start(tmp_path, BUSY, "busy")
    try:
        cfg = config(tmp_path, py_spy="/nonexistent/py-spy")
        adm = SnapshotTaker(cfg, runtime(cfg, {proc.pid: 0})).take(finding())
    finally:
        stop(proc)
    _top, manifest = extract(adm.path, tmp_path / "x")
    spy = item(manifest, f"stacks:py-spy:{proc.pid}")
    assert spy["status"] == "failed" and spy["problems"][0]["reason"] == "tool_absent"


# -- secrets ---------------------------------------------------------------------------------------

class ConfigWithWebhook(Config):
    """Stands in for a channel section: a Secret somewhere in the config tree."""

    webhook: SecretStr


def test_secrets_never_enter_the_archive(tmp_path):
    webhook = "https://hooks.example.test/services/T0PLANTED/B0PLANTED/webhookpathsecret123?access_token=qtokenPLANTED77"
    env_token = "envtokenPLANTED-4242"
    env_password = "pw-PLANTED-9090"
    log = tmp_path / "train.log"
    log.write_text(
        "step 1 loss 2.0\n"
        f"posting alert to {webhook}\n"
        f"client: POST /services/T0PLANTED/B0PLANTED/webhookpathsecret123 ok\n"
        f"using token {env_token} for the hub\n"
        "db password=hunter2PLANTED and api_key: akPLANTED555\n"
        "proxy http://user:proxypassPLANTED@10.0.0.1:3128\n"
        "HCCL_CONNECT_TIMEOUT=1800\n"
        f"checkpoint saved to {tmp_path}/ckpt-100\n")
    # PWD (the shell's working directory) is no password: its value, the job's folder, stays.
    env = dict(os.environ, HF_TOKEN=env_token, DB_PASSWORD=env_password, HCCL_CONNECT_TIMEOUT="1800",
               ASCEND_SECRET_KEY=env_password, RANK="0", PWD=str(tmp_path))
    proc, _ = start(tmp_path, BUSY, "busy", env=env, args=(f"--hub-token={env_token}",))
    try:
        raw = raw_config(tmp_path)
        raw["probes"] = {"logs": {"sources": [{"name": "train", "paths": [str(log)]}]}}
        cfg = ConfigWithWebhook.model_validate({**raw, "webhook": webhook})
        f = Finding(rule="stall", severity="critical", summary=f"stalled; webhook {webhook}",
                    labels={"host": "node-s", "training_job": "job-s"}, evidence=(f"token={env_token}",))
        adm = SnapshotTaker(cfg, runtime(cfg, {proc.pid: 0})).take(f)
    finally:
        stop(proc)
    top, manifest = extract(adm.path, tmp_path / "x")
    planted = [webhook, "webhookpathsecret123", "qtokenPLANTED77", env_token, env_password,
               "hunter2PLANTED", "akPLANTED555", "proxypassPLANTED"]
    everything = b"".join(p.read_bytes() for p in top.rglob("*") if p.is_file())
    for secret in planted:
        assert secret.encode() not in everything, f"{secret} leaked into the snapshot"
    # What is not secret is still there (so this test can fail for the right reason).
    env_text = (top / f"env/{proc.pid}.txt").read_text()
    assert "HCCL_CONNECT_TIMEOUT=1800" in env_text and "RANK=0" in env_text
    assert f"ASCEND_SECRET_KEY={REDACTED}" in env_text
    log_text = next(top.glob("logs/train/**/train.log")).read_text()
    assert "step 1 loss 2.0" in log_text and REDACTED in log_text
    assert f"checkpoint saved to {tmp_path}/ckpt-100" in log_text
    assert manifest["trigger"]["finding"]["summary"].startswith("stalled; webhook ")


# -- retention and the disk floor ----------------------------------------------------------------------

def _fake_archive(d: Path, name: str, size: int, age: float) -> Path:
    p = d / name
    p.write_bytes(b"x" * size)
    t = time.time() - age
    os.utime(p, (t, t))
    return p


def test_retention_by_count_bytes_and_age(tmp_path):
    d = tmp_path / "snaps"
    d.mkdir()
    old = _fake_archive(d, "20240101T000000Z-n-stall.tar.gz", 10, age=30 * 86400)
    a = _fake_archive(d, "20240102T000000Z-n-stall.tar.gz", 100, age=5000)
    b = _fake_archive(d, "20240103T000000Z-n-stall.tar.gz", 100, age=4000)
    c = _fake_archive(d, "20240104T000000Z-n-stall.tar.gz", 100, age=3000)
    e = _fake_archive(d, "20240105T000000Z-n-stall.tar.gz", 100, age=2000)
    other = _fake_archive(d, "notes.txt", 10, age=90 * 86400)  # not ours: never touched
    # Age: only the 30-day-old one goes.
    apply_retention(str(d), keep=100, max_bytes=10**9, max_age=7 * 86400)
    assert not old.exists() and a.exists() and other.exists()
    # Count: keep 3 -> the oldest (a) goes.
    apply_retention(str(d), keep=3, max_bytes=10**9, max_age=7 * 86400)
    assert not a.exists() and b.exists() and c.exists() and e.exists()
    # Bytes: 250 allowed -> b goes (oldest first), c and e stay.
    apply_retention(str(d), keep=3, max_bytes=250, max_age=7 * 86400)
    assert not b.exists() and c.exists() and e.exists() and other.exists()


def test_retention_applies_to_real_snapshots(tmp_path):
    cfg = config(tmp_path, keep=2)
    taker = SnapshotTaker(cfg, runtime(cfg))
    paths = [taker.take(manual_finding(cfg, f"n{i}")).path for i in range(3)]
    left = sorted(str(p) for p in (tmp_path / "snaps").glob("*.tar.gz"))
    assert len(set(paths)) == 3
    assert left == sorted(paths[1:]), left
    assert taker.stats()["disk_bytes"] == sum(os.path.getsize(p) for p in left)


def test_free_space_floor_skips_with_reason_and_metric(tmp_path, caplog):
    cfg = config(tmp_path, min_free_space="1000TB")
    taker = SnapshotTaker(cfg, runtime(cfg))
    with caplog.at_level("WARNING", logger="watchdog.snapshots"):
        assert taker.request(finding()) is None
    assert taker.stats()["skipped"]["low_disk"] == 1
    assert taker.stats()["results"]["skipped"] == 1
    assert "below the floor snapshots.min_free_space" in caplog.text
    assert list((tmp_path / "snaps").glob("*")) == []
    # The skip did not use up the rule's rate-limit slot.
    cfg2 = config(tmp_path, min_free_space="1MiB")
    taker.runtime.config = cfg2
    path = taker.request(finding())
    assert path is not None
    wait_archive(path)
    taker.close()


def test_rate_limit_per_rule_and_job(tmp_path):
    cfg = config(tmp_path, min_interval="1h")
    taker = SnapshotTaker(cfg, runtime(cfg))
    first = taker.request(finding("stall"))
    assert first is not None
    # Same rule and job: limited; no second capture, but the alert names the incident's archive.
    assert taker.request(finding("stall", rank="1")) == first
    other_job = taker.request(Finding(rule="stall", severity="critical", summary="s",
                                      labels={"host": "node-s", "training_job": "other"}))
    assert other_job is not None
    taker.close()
    assert taker.stats()["skipped"]["rate_limited"] == 1
    assert taker.stats()["results"]["taken"] == 2
    assert os.path.exists(first) and os.path.exists(other_job)
    assert len(os.listdir(os.path.dirname(first))) == 2


def test_policy_defaults_and_overrides(tmp_path):
    scfg = config(tmp_path, rules={"npu_low_util": {"enabled": True}, "stall": {"enabled": False}}).snapshots
    assert wants_snapshot(finding("loss_nan", "critical"), scfg)
    assert not wants_snapshot(finding("loss_nan", "warning"), scfg)
    assert wants_snapshot(finding("npu_low_util", "info"), scfg)
    assert not wants_snapshot(finding("stall", "critical"), scfg)
    flagged = Finding(rule="stall", severity="info", summary="s", labels={}, snapshot=True)
    assert wants_snapshot(flagged, scfg)


def test_disabled_builds_no_taker(tmp_path):
    cfg = config(tmp_path, enabled=False)
    assert build_snapshot_taker(cfg, runtime(cfg)) is None


# -- sources that cannot be read ------------------------------------------------------------------------

def _take_as_nobody(taker: SnapshotTaker, f: Finding) -> str:
    """Run the capture in a forked child that dropped root, like a daemon running unprivileged."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            adm = taker.take(f)
            os.write(w, (adm.path or f"skipped: {adm.skipped} {adm.message}").encode())
        except BaseException as exc:
            os.write(w, f"child failed: {type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    return out


@pytest.fixture
def open_tmp():
    """A temporary directory an unprivileged user can reach (pytest's own tmp is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="npu-watchdog-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_unreadable_source_is_recorded_in_the_manifest(open_tmp, tmp_path):
    secret_log = open_tmp / "root-only.log"
    secret_log.write_text("private\n")
    os.chmod(secret_log, 0o000)
    readable = open_tmp / "ok.log"
    readable.write_text("fine\n")
    os.chmod(readable, 0o644)
    missing = open_tmp / "absent.log"
    cfg = with_logs(config(open_tmp, dmesg_lines=0), str(secret_log), str(readable), str(missing))
    if os.geteuid() == 0:
        (open_tmp / "snaps").mkdir(mode=0o700)
        os.chown(open_tmp / "snaps", 65534, 65534)
        taker = SnapshotTaker(cfg, None)
        path = _take_as_nobody(taker, manual_finding(cfg, "unreadable"))
    else:
        path = SnapshotTaker(cfg, None).take(manual_finding(cfg, "unreadable")).path
    assert path.startswith(str(open_tmp)), f"no snapshot written: {path}"
    _top, manifest = extract(path, tmp_path / "x")
    logs = item(manifest, "logs:train")
    reasons = {p["what"]: p["reason"] for p in logs["problems"]}
    assert reasons[str(secret_log)] == "permission_denied"
    assert reasons[str(missing)] == "not_found"
    assert logs["status"] == "partial" and any(f.endswith("ok.log") for f in logs["files"])


def test_budget_exhausted_finishes_with_what_it_has(tmp_path, monkeypatch):
    """A source whose read hangs (a hung network filesystem: a FIFO no longer does, it is refused
    without being opened for a blocking read) is left out at the budget, the rest is kept."""
    import threading

    from watchdog.snapshots import collect

    stuck_path = tmp_path / "blocked.log"
    stuck_path.write_text("never read\n")
    release = threading.Event()
    real_tail = collect.tail_file

    def tail_file(path, *args):
        if path == str(stuck_path):
            release.wait(60)
        return real_tail(path, *args)

    monkeypatch.setattr(collect, "tail_file", tail_file)
    good = tmp_path / "good.log"
    good.write_text("evidence\n")
    cfg = config(tmp_path, budget="1s")
    cfg = cfg.model_copy(update={"probes": cfg.probes.model_copy(update={"logs": cfg.probes.logs.model_validate(
        {"sources": [{"name": "stuck", "paths": [str(stuck_path)]}, {"name": "good", "paths": [str(good)]}]})})})
    try:
        adm = SnapshotTaker(cfg, None).take(finding())
    finally:
        release.set()  # release the stuck reader thread
    top, manifest = extract(adm.path, tmp_path / "x")
    assert manifest["complete"] is False and "logs:stuck" in manifest["missing"]
    stuck = item(manifest, "logs:stuck")
    assert stuck["status"] == "missing" and stuck["problems"][0]["reason"] == "budget_exceeded"
    assert item(manifest, "logs:good")["status"] == "ok"
    assert next(top.glob("logs/good/**/good.log")).read_text() == "evidence\n"


# -- npu-smi ------------------------------------------------------------------------------------------

def test_npu_smi_info_and_health_of_unhealthy_cards(tmp_path):
    capture = FIXTURES / "npu-smi" / "info_910B3_8card_25.2.0_procs.txt"
    health = FIXTURES / "npu-smi" / "info_t_health_Alarm_multicode_23.0.7.txt"
    if not capture.exists() or not health.exists():
        pytest.skip("npu-smi fixtures not available")
    fake = tmp_path / "npu-smi"
    calls = tmp_path / "calls.txt"
    fake.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        open({str(calls)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
        if sys.argv[1:3] == ["info", "-t"]:
            sys.stdout.write(open({str(health)!r}).read())
        else:
            sys.stdout.write(open({str(capture)!r}).read())
        """))
    fake.chmod(0o755)
    chip = dict(device_id=None, name="910B3", power_w=None, temp_c=None, aicore_util_pct=None, memory_used_mb=None,
                memory_total_mb=None, hbm_used_mb=None, hbm_total_mb=None, bus_id=None)
    obs = NpuObservation(version="25.2.0", processes=(), chips=(
        NpuChip(npu=0, chip=0, health="OK", **chip), NpuChip(npu=3, chip=0, health="Alarm", **chip)),
        health_codes={(3, 0): ["A4025021"]})
    cfg = config(tmp_path)
    cfg = cfg.model_copy(update={"probes": cfg.probes.model_copy(update={
        "npu": cfg.probes.npu.model_copy(update={"npu_smi": str(fake)})})})
    adm = SnapshotTaker(cfg, runtime(cfg, npu=obs)).take(finding("npu_unhealthy", npu="3", chip="0"))
    top, manifest = extract(adm.path, tmp_path / "x")
    assert (top / "npu-smi/info.txt").read_text().startswith(capture.read_text())
    assert "A4025021" in (top / "npu-smi/health-3.txt").read_text()
    assert not (top / "npu-smi/health-0.txt").exists()
    assert calls.read_text().splitlines() == ["info", "info -t health -i 3"]
    assert manifest["versions"]["npu_smi"] == "25.2.0"
    assert item(manifest, "npu-smi")["status"] == "ok"


# -- concurrency --------------------------------------------------------------------------------------------

def test_concurrent_triggers_produce_separate_complete_archives(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"line {i}\n" for i in range(5000)))
    cfg = with_logs(config(tmp_path, max_concurrent=6), str(log))
    taker = SnapshotTaker(cfg, runtime(cfg))
    rules = ["stall", "loss_nan", "npu_missing"]
    paths: List[Optional[str]] = [None] * 3
    go = threading.Event()

    def fire(i: int) -> None:
        go.wait()
        paths[i] = taker.request(finding(rules[i]))

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    # Two on-demand snapshots at the same moment with the same rule get distinct names too.
    manual: List[Optional[str]] = [None, None]

    def take(i: int) -> None:
        manual[i] = taker.take(manual_finding(cfg, f"m{i}")).path

    mt = [threading.Thread(target=take, args=(i,)) for i in range(2)]
    for t in mt:
        t.start()
    for t in mt:
        t.join()
    all_paths = [p for p in paths + manual if p]
    assert len(all_paths) == 5 and len(set(all_paths)) == 5, all_paths
    # Every capture finishes before the taker closes: closing stops running captures on purpose
    # (their archives are partial), which on a loaded machine could catch a slow one.
    for p in all_paths:
        wait_archive(p)
    taker.close()
    for i, p in enumerate(all_paths):
        top, manifest = extract(p, tmp_path / f"x{i}")
        assert manifest["complete"] is True
        assert manifest["trigger"]["finding"]["rule"] == (rules[i] if i < 3 else "manual")
        assert next(top.glob("logs/train/**/train.log")).read_text().endswith("line 4999\n")
    assert not list((tmp_path / "snaps").glob(".*partial"))
    assert taker.stats()["results"]["taken"] == 5


# -- plog files and version files ----------------------------------------------------------------------

def test_newest_plogs_of_the_job_and_version_files(tmp_path):
    log_root = tmp_path / "ascend-log"
    plog_dir = log_root / "debug" / "plog"
    plog_dir.mkdir(parents=True)
    driver = tmp_path / "version.info"
    driver.write_text("Version=23.0.rc3\nascendhal_version=7.35.19\n")
    proc, _ = start(tmp_path, BUSY, "busy", env=dict(os.environ, ASCEND_PROCESS_LOG_PATH=str(log_root)))
    try:
        for i, stamp in enumerate(["20250124112400001", "20250124112500002", "20250124112600003"]):
            p = plog_dir / f"plog-{proc.pid}_{stamp}.log"
            p.write_text(f"[ERROR] HCCL({proc.pid},python3):2025-01-24-11:2{i}:07.908.424 [a.cc:1][2]file {i}\n")
            os.utime(p, (time.time() - 100 + i, time.time() - 100 + i))
        (plog_dir / "plog-1_20250124112400001.log").write_text("another process\n")
        cfg = config(tmp_path, plog_files=2, driver_version_file=str(driver), cann_version_files=[])
        adm = SnapshotTaker(cfg, runtime(cfg, {proc.pid: 0})).take(finding("log_hccl"))
    finally:
        stop(proc)
    top, manifest = extract(adm.path, tmp_path / "x")
    kept = sorted(p.name for p in (top / "plog" / str(proc.pid)).iterdir())
    assert kept == [f"plog-{proc.pid}_20250124112500002.log", f"plog-{proc.pid}_20250124112600003.log"]
    assert not (top / "plog" / "1").exists()
    assert manifest["versions"]["files"][str(driver)]["Version"] == "23.0.rc3"

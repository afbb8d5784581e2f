"""The real daemon as a subprocess: endpoint, signals, reload, sd_notify, hung probes."""

from __future__ import annotations

import signal
import socket
import sys
import time
import uuid

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import http_get, wait_for
from watchdog.metrics.catalog import all_metrics


def cmd(name, argv, interval="1s", timeout="2s", **kw):
    return {"name": name, "argv": argv, "interval": interval, "timeout": timeout, **kw}


BASE = {"probes": {"jitter": "0s", "commands": [cmd("ok", ["/bin/true"])]}}


def test_endpoints_serve_cached_state(make_daemon):
    d = make_daemon(BASE)
    wait_for(lambda: d.metrics().get('npu_watchdog_probe_up{probe="command:ok"}') == 1.0, what="probe up")
    m = d.metrics()
    assert m['npu_watchdog_probe_errors_total{probe="command:ok"}'] == 0
    assert m['npu_watchdog_probe_last_success_timestamp_seconds{probe="command:ok"}'] > time.time() - 60
    assert any(k.startswith("npu_watchdog_build_info{") for k in m)
    assert m['npu_watchdog_node_info{host="node-t",training_job="job-t"}'] == 1
    # READY=1 (and /healthz 200) follow the first round's evaluation, a moment after probe_up.
    code, body = wait_for(lambda: (lambda r: r if r[0] == 200 else None)(http_get(d.url + "/healthz")),
                          what="/healthz 200")
    assert body.startswith("ok")
    code, page = http_get(d.url + "/")
    assert code == 200 and "command:ok" in page and "npu-watchdog" in page
    assert http_get(d.url + "/nope")[0] == 404
    st = d.status()
    assert st["host"] == "node-t" and st["training_job"] == "job-t"
    (probe,) = st["probes"]
    assert probe["name"] == "command:ok" and probe["up"] and probe["next_run"] is not None


def test_healthz_is_503_until_the_first_round_completes(make_daemon, tmp_path):
    """A probe whose first round is held back by the test (a real process waiting for a file):
    until it ends, the daemon cannot vouch for anything and /healthz says so."""
    release = tmp_path / "release"
    hold = ["/bin/sh", "-c", f"while [ ! -e '{release}' ]; do sleep 0.05; done"]
    d = make_daemon({"probes": {"jitter": "0s", "commands": [cmd("held", hold, timeout="60s")]}})
    try:
        code, body = http_get(d.url + "/healthz")
        assert code == 503 and "first probe round" in body
        assert http_get(d.url + "/metrics")[0] == 200  # metrics are served meanwhile
    finally:
        release.write_text("go")
    code, body = wait_for(lambda: (lambda r: r if r[0] == 200 else None)(http_get(d.url + "/healthz")),
                          what="/healthz 200 after the first round")
    assert body.startswith("ok")


def test_metrics_match_the_metric_table(make_daemon):
    """Every family served is in the table with the same type and labels, and vice versa."""
    d = make_daemon(BASE)
    wait_for(lambda: d.metrics().get('npu_watchdog_probe_up{probe="command:ok"}') == 1.0, what="probe up")
    table = {m.name: m for m in all_metrics()}
    served = {}
    for fam in text_string_to_metric_families(d.metrics_text()):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        served[name] = fam
    assert set(served) == set(table), (set(served) ^ set(table))
    for name, fam in served.items():
        d_ = table[name]
        assert fam.type == d_.type, name
        assert fam.documentation == d_.help, name
        for s in fam.samples:
            assert set(s.labels) == set(d_.labels), (name, s.labels)


def test_sigterm_stops_cleanly(make_daemon):
    d = make_daemon(BASE)
    wait_for(lambda: d.status()["probes"][0]["up"], what="first round")
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.proc.wait(40)
    assert rc == 0
    assert time.monotonic() - t0 < 30, "must stop, not hang (a hang bound; a loaded machine stretches a stop)"
    assert "stopped" in d.log()


def test_sighup_applies_valid_config_and_keeps_history(make_daemon):
    d = make_daemon(BASE)
    wait_for(lambda: d.status()["probes"][0]["runs_total"] >= 2, what="two rounds")
    runs_before = d.status()["probes"][0]["runs_total"]
    cfg = dict(d.config)
    cfg["probes"] = {"jitter": "0s", "commands": [cmd("ok", ["/bin/true"]), cmd("second", ["/bin/true"])]}
    d.write_config(cfg)
    d.signal(signal.SIGHUP)
    wait_for(lambda: len(d.status()["probes"]) == 2, what="new probe after reload")
    ok = [p for p in d.status()["probes"] if p["name"] == "command:ok"][0]
    assert ok["runs_total"] >= runs_before, "history of the kept probe survives the reload"
    wait_for(lambda: d.metrics()['npu_watchdog_config_reloads_total{result="success"}'] == 1, timeout=10,
             what="reload counted")
    assert "config reloaded" in d.log()


def test_sighup_with_invalid_config_keeps_running_config(make_daemon):
    d = make_daemon(BASE)
    wait_for(lambda: d.status()["probes"][0]["up"], what="first round")
    d.config_path.write_text("probes:\n  jitter: 5 minutes\n  bogus: 1\n")
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reload rejected" in d.log(), what="reload rejection logged")
    log = d.log()
    assert "probes.jitter: expected a duration like 30s or 5m, got '5 minutes'" in log
    assert "probes.bogus: unknown key" in log
    m = d.metrics()
    assert m['npu_watchdog_config_reloads_total{result="failure"}'] == 1
    runs = d.status()["probes"][0]["runs_total"]
    wait_for(lambda: d.status()["probes"][0]["runs_total"] > runs, what="old config still probing")
    assert d.stop() == 0


def test_hung_command_is_killed_and_does_not_block_others(make_daemon, tmp_path):
    marker = f"nw-hang-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "hang.sh"
    # A child that sleeps forever, itself spawning a grandchild: both must die (process group).
    sleeper = f"{sys.executable} -c 'import time; time.sleep(1000)' {marker}"
    script.write_text(f"#!/bin/sh\n{sleeper} &\nexec {sleeper}\n")
    script.chmod(0o755)
    cfg = {"probes": {"jitter": "0s", "commands": [
        cmd("hang", [str(script)], interval="1s", timeout="1s"),
        cmd("ok", ["/bin/true"], interval="1s"),
    ]}}
    d = make_daemon(cfg)

    def findings():
        return {f["labels"].get("check"): f for f in d.status()["findings"]}

    wait_for(lambda: "hang" in findings(), what="command_check finding for the hung check")
    f = findings()["hang"]
    assert f["rule"] == "command_check" and f["value"] == "timed out"
    ok_runs = [p for p in d.status()["probes"] if p["name"] == "command:ok"][0]["runs_total"]
    wait_for(lambda: [p for p in d.status()["probes"] if p["name"] == "command:ok"][0]["runs_total"] >= ok_runs + 2,
             what="the other probe keeps running")

    def leftovers():
        return [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]

    # Each round's processes are killed; at most the current round's may be alive at any instant.
    wait_for(lambda: len(leftovers()) <= 2, what="killed hung children")
    assert d.stop() == 0
    wait_for(lambda: not leftovers(), timeout=10, what="no hung children left after stop")


def test_missing_program_marks_probe_down(make_daemon):
    d = make_daemon({"probes": {"jitter": "0s", "commands": [cmd("gone", ["/nonexistent/check-x"])]}})
    wait_for(lambda: any(f["rule"] == "probe_down" for f in d.status()["findings"]), what="probe_down")
    m = d.metrics()
    assert m['npu_watchdog_probe_up{probe="command:gone"}'] == 0
    assert m['npu_watchdog_probe_errors_total{probe="command:gone"}'] >= 1
    st = d.status()["probes"][0]
    assert "cannot run" in st["last_error"] and "/nonexistent/check-x" in st["last_error"]
    assert "probe command:gone failed" in d.log()


def test_port_in_use_is_a_clear_error_and_no_exit(make_daemon):
    """A taken port is said in the log, and the daemon runs on (it listens once the port is
    free: tests/daemon/test_hostile_startup.py)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        d = make_daemon(BASE, start=False)
        d.config["http"] = {"listen": f"127.0.0.1:{s.getsockname()[1]}"}
        d.write_config(d.config)
        d.start(wait=False)
        wait_for(lambda: "cannot listen on" in d.log(), what="the error in the log")
        wait_for(lambda: "first probe round complete" in d.log(), what="the first round")
        assert d.proc.poll() is None, d.log()


def _recv_all(sock, until, timeout=20.0):
    msgs = []
    deadline = time.monotonic() + timeout
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            msgs.append(sock.recv(65536).decode("utf-8"))
        except socket.timeout:
            pass
        if until(msgs):
            return msgs
    raise AssertionError(f"notify messages so far: {msgs}")


@pytest.mark.parametrize("abstract", [False, True])
def test_sd_notify_protocol(make_daemon, tmp_path, abstract):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:
        name = f"nw-test-{uuid.uuid4().hex}"
        sock.bind("\0" + name)
        addr = "@" + name
    else:
        addr = str(tmp_path / "notify.sock")
        sock.bind(addr)
    try:
        d = make_daemon(BASE, env={"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "1000000"}, start=False)
        d.start(wait=False)
        msgs = _recv_all(sock, lambda m: any("READY=1" in x for x in m) and sum("WATCHDOG=1" in x for x in m) >= 2)
        first_ready = next(x for x in msgs if "READY=1" in x)
        assert "STATUS=" in first_ready and "probes up" in first_ready
        d.signal(signal.SIGHUP)
        msgs = _recv_all(sock, lambda m: any("RELOADING=1" in x for x in m)
                         and any("READY=1" in x for x in m[[i for i, x in enumerate(m) if "RELOADING=1" in x][0]:]))
        reloading = next(x for x in msgs if "RELOADING=1" in x)
        assert "MONOTONIC_USEC=" in reloading
        usec = int(reloading.split("MONOTONIC_USEC=")[1].split()[0])
        assert abs(usec / 1e6 - time.clock_gettime(time.CLOCK_MONOTONIC)) < 60
        d.signal(signal.SIGTERM)
        _recv_all(sock, lambda m: any("STOPPING=1" in x for x in m))
        assert d.proc.wait(15) == 0
    finally:
        sock.close()


def test_watchdog_ping_withheld_for_another_pid(make_daemon, tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    addr = str(tmp_path / "n.sock")
    sock.bind(addr)
    try:
        d = make_daemon(BASE, env={"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "500000", "WATCHDOG_PID": "1"},
                        start=False)
        d.start(wait=False)
        msgs = _recv_all(sock, lambda m: any("READY=1" in x for x in m))
        time.sleep(2)
        sock.settimeout(0.2)
        try:
            while True:
                msgs.append(sock.recv(65536).decode())
        except socket.timeout:
            pass
        assert not any("WATCHDOG=1" in x for x in msgs), msgs
    finally:
        sock.close()


def test_notifier_sends_utf8(tmp_path):
    from watchdog.service.sdnotify import Notifier

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    addr = str(tmp_path / "u.sock")
    sock.bind(addr)
    try:
        assert Notifier(addr).ready("作业 llama: 8/8 NPU 正常")
        sock.settimeout(2)
        assert sock.recv(4096).decode("utf-8") == "READY=1\nSTATUS=作业 llama: 8/8 NPU 正常"
    finally:
        sock.close()
    assert not Notifier("").ready("x")


def test_stopping_ends_running_commands_with_their_process_groups(make_daemon, tmp_path):
    """A command still running when the daemon stops (its own session, so no signal reaches it)
    must not outlive the daemon: a stopped watchdog leaves nothing behind."""
    pid_file = tmp_path / "pid"
    hang = ["/bin/sh", "-c", f"echo $$ > '{pid_file}'; while :; do sleep 0.05; done"]
    d = make_daemon({"probes": {"jitter": "0s", "commands": [cmd("hang", hang, timeout="120s")]}})
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="command started"))
    assert d.stop() == 0

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().split(") ")[1].startswith("Z")
        except FileNotFoundError:
            return True
    wait_for(gone, timeout=10, what="the command killed with the daemon")

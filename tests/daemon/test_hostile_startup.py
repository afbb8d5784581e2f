"""Start-up and configuration as a hostile or unlucky node treats them: each test runs the real
CLI or daemon as a subprocess against real files, ports, sockets and filesystems.

- a secret written with a YAML type other than a string (an unquoted numeric API key) is never
  echoed by `check-config` or `run`;
- a vendor's `Retry-After: 86400` waits `alerting.retry_max` at most, and a later incident on the
  same channel is not held behind it;
- the relay refuses a non-loopback address without a token (or the logged opt-out) and compares
  tokens in constant time;
- a port another user holds at start is retried, said once in the journal, and alerts go out
  meanwhile;
- a state folder that cannot be created (full disk) or is read-only right after the database was
  created: the daemon starts on memory-only alert state, says so, and pages once it heals.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import time
import urllib.error
import urllib.request
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import yaml

import pytest

from tests.fakes.receivers import Answer, Receiver
from tests.helpers import REPO, free_port, http_get, wait_for
from tests.hostile_kit import as_other_user

HANG_BOUND = 60.0
OOM = b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity)\n"


def watched_logs(tmp: Path, *ranks: int) -> List[Path]:
    (tmp / "logs").mkdir(exist_ok=True)
    out = []
    for rank in ranks:
        log = tmp / "logs" / f"train_rank{rank}.log"
        log.write_bytes(b"step 1 loss 2.5\n")
        out.append(log)
    return out


def log_config(tmp: Path, channels: List[dict], **alerting: str) -> dict:
    """Logs watched every second, one page per failure line, small engine timings."""
    al = {"group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms", "retry_max": "2s",
          "channels": channels}
    al.update(alerting)
    return {"paths": {"state_dir": str(tmp / "state"), "snapshot_dir": str(tmp / "snapshots")},
            "probes": {"logs": {"enabled": True, "interval": "1s", "rescan": "1s", "hold": "1h",
                                "sources": [{"name": "train", "paths": [str(tmp / "logs" / "*.log")]}]}},
            "alerting": al}


def followed(d, n: int = 1) -> None:
    wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == n, what="logs followed")


def paged_ranks(rx: Receiver) -> List[Tuple[str, str, str]]:
    """(status, rule, rank) of every alert in every message the receiver accepted, in order."""
    return [(r.json["status"], a["labels"]["alertname"], a["labels"].get("rank", ""))
            for r in rx.accepted() for a in r.json["alerts"]]


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "watchdog", *argv], capture_output=True, text=True,
                          cwd=str(REPO), timeout=HANG_BOUND)


@pytest.mark.parametrize("written, echoed", [
    ("918273645501234", "918273645501234"),  # an int
    ("9182736455.01234", "9182736455.01234"),  # a float
    ("0x5eedf00dcafe", str(0x5EEDF00DCAFE)),  # a YAML 1.1 hex int, echoed as its decimal value
])
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_an_unquoted_numeric_header_secret_is_never_echoed(tmp_path, command, written, echoed) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("paths:\n  state_dir: %s\nalerting:\n  channels:\n    - name: hook\n      type: webhook\n"
                   "      url: http://127.0.0.1:9/hook\n      headers:\n        X-Api-Key: %s\n"
                   % (tmp_path / "state", written))
    out = cli(command, "-c", str(cfg))
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    assert "alerting.channels[0].headers.X-Api-Key" in out.stderr, out.stderr
    assert "quote the secret" in out.stderr, out.stderr
    for text in (out.stdout, out.stderr):
        assert echoed not in text and written not in text, text
        assert echoed[:8] not in text, text


@pytest.mark.slow
def test_a_day_long_retry_after_waits_retry_max_and_never_holds_a_later_incident(make_daemon, tmp_path) -> None:
    """Row 5: the first answer is a 429 with `Retry-After: 86400`. The page is retried after
    `retry_max` (2 s here), not after an hour or a day, and a second incident (another rank's
    failure, written while the channel is in its back-off) goes out too; each once."""
    rank0, rank1 = watched_logs(tmp_path, 0, 1)
    with Receiver("webhook") as pager:
        pager.script(Answer(429, {"error": "slow down"}, headers={"Retry-After": "86400"}))
        d = make_daemon(log_config(tmp_path, [{"type": "webhook", "name": "pager", "url": pager.url}]))
        followed(d, 2)
        with open(rank0, "ab") as fh:
            fh.write(OOM)
        pager.wait_arrived(1)
        with open(rank1, "ab") as fh:
            fh.write(OOM)
        # Both within minutes (the bound only stops a failing test): before the fix the
        # channel waited 3600 s for either.
        wait_for(lambda: {a[2] for a in paged_ranks(pager)} >= {"0", "1"}, timeout=120,
                 what="both ranks paged")
        assert "capped by alerting.retry_max" in d.log(), d.log()[-3000:]
        time.sleep(3)  # a duplicate would have arrived by now
        pages = paged_ranks(pager)
        assert sorted(pages) == [("firing", "log_oom", "0"), ("firing", "log_oom", "1")], pages
        assert len(pager.requests) == len(pager.accepted()) + 1, "one 429, every other request accepted"
        assert d.alive()


# -- the relay ---------------------------------------------------------------------------------------

def relay_config(tmp: Path, listen: str, **extra: object) -> Path:
    cfg = {"listen": listen, "state_dir": str(tmp / "relay-state"),
           "alerting": {"channels": [{"type": "webhook", "name": "oncall", "url": "http://127.0.0.1:9/hook"}]}}
    cfg.update(extra)
    path = tmp / "relay.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class RelayProc:
    """`npu-watchdog relay` as a subprocess, its output in a file."""

    def __init__(self, config: Path, port: int):
        self.log_path = config.parent / "relay.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "watchdog", "relay", "-c", str(config)],
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO))
        self.url = f"http://127.0.0.1:{port}"

    def up(self) -> "RelayProc":
        wait_for(lambda: self.proc.poll() is None and http_get(self.url + "/healthz")[0] == 200, timeout=60,
                 what="relay up")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def post(self, headers: Optional[Dict[str, str]] = None) -> int:
        doc = {"version": "4", "groupKey": "k", "status": "resolved", "alerts": [
            {"status": "resolved", "labels": {"alertname": "log_oom", "training_job": "llm", "host": "n1"},
             "annotations": {}, "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2026-01-01T00:01:00Z"}]}
        req = urllib.request.Request(self.url + "/alertmanager", data=json.dumps(doc).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self._log.close()


@pytest.fixture
def relays():
    made: List[RelayProc] = []

    def make(config: Path, port: int) -> RelayProc:
        r = RelayProc(config, port)
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()


def test_the_relay_refuses_a_non_loopback_address_without_a_token(tmp_path, relays) -> None:
    """Row 6: on 0.0.0.0 without a token anyone who reaches the port could post a resolve or a
    new job. The relay refuses to start (exit 2, the key named), `--check` too."""
    port = free_port()
    cfg = relay_config(tmp_path, f"0.0.0.0:{port}")
    check = cli("relay", "-c", str(cfg), "--check")
    assert check.returncode == 2 and "bearer_token: required when listening on 0.0.0.0" in check.stderr, check
    relay = relays(cfg, port)
    assert relay.proc.wait(HANG_BOUND) == 2, relay.log()
    assert "allow_unauthenticated" in relay.log(), relay.log()


def test_the_relay_with_a_token_on_any_address_answers_only_the_token(tmp_path, relays) -> None:
    port = free_port()
    token = "relay-tok-5521"
    relay = relays(relay_config(tmp_path, f"0.0.0.0:{port}", bearer_token=token), port).up()
    assert relay.post() == 401
    assert relay.post({"Authorization": "Bearer relay-tok-5522"}) == 401
    assert relay.post({"Authorization": "Bearer " + token[:-1]}) == 401
    assert relay.post({"Authorization": "Bearer " + token}) == 200
    assert token not in relay.log() and "any local user" not in relay.log()


@pytest.mark.parametrize("listen, warning", [
    ("0.0.0.0", "allow_unauthenticated: the relay accepts posts without a token from anyone"),
    ("127.0.0.1", "no bearer_token: any local user can post to the relay"),
])
def test_an_unauthenticated_relay_says_so_at_start(tmp_path, relays, listen, warning) -> None:
    """The explicit opt-out (or the loopback default) starts, and the journal says who may post."""
    port = free_port()
    extra = {"allow_unauthenticated": True} if listen == "0.0.0.0" else {}
    cfg = relay_config(tmp_path, f"{listen}:{port}", **extra)
    check = cli("relay", "-c", str(cfg), "--check")
    assert check.returncode == 0 and warning in check.stdout, check
    relay = relays(cfg, port).up()
    wait_for(lambda: warning in relay.log(), what="the start-up warning")
    assert relay.post() == 200


# -- the state folder at start -------------------------------------------------------------------------

def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {done.stderr.decode(errors='replace').strip()}")


class SmallDisk:
    """A real small filesystem (tmpfs) on `where`, filled to ENOSPC by blocks or by inodes."""

    def __init__(self, where: Path, inodes: bool):
        self.where, self.inodes = where, inodes
        where.mkdir()
        opts = "size=2m,mode=0700" + (",nr_inodes=64" if inodes else "")
        try:
            _run("mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where))
        except OSError as exc:
            pytest.skip(f"cannot mount a small tmpfs for ENOSPC: {exc}")

    def fill(self) -> None:
        fill = self.where / "fill"
        fill.mkdir()
        if self.inodes:
            try:
                for i in range(100000):
                    (fill / str(i)).touch()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
            return
        with open(fill / "blocks", "wb", buffering=0) as fh:
            for size in (1 << 16, 512):
                try:
                    while True:
                        fh.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc

    def free(self) -> None:
        shutil.rmtree(self.where / "fill")

    def cleanup(self) -> None:
        subprocess.run(["umount", "-l", str(self.where)], capture_output=True)


class ReadOnly:
    """A folder read-only for root, for real: `immutable` (chattr +i: nothing can be created in it,
    so SQLite cannot make its journal) or a read-only bind mount onto itself (EROFS)."""

    def __init__(self, how: str, folder: Path):
        self.how, self.folder = how, str(folder)
        self.mounted = False

    def on(self) -> None:
        try:
            if self.how == "immutable":
                _run("chattr", "+i", self.folder)
            else:
                _run("mount", "--bind", self.folder, self.folder)
                self.mounted = True
                _run("mount", "-o", "remount,bind,ro", self.folder)
        except OSError as exc:
            self.cleanup()
            pytest.skip(f"this machine refuses to make a folder read-only for root: {exc}")

    def off(self) -> None:
        if self.how == "immutable":
            _run("chattr", "-i", self.folder)
        elif self.mounted:
            _run("mount", "-o", "remount,bind,rw", self.folder)

    def cleanup(self) -> None:
        try:
            self.off()
        except OSError:
            pass
        if self.mounted:
            subprocess.run(["umount", "-l", self.folder], capture_output=True)


def two_channels(pager: Receiver, ops: Receiver) -> List[dict]:
    return [{"type": "webhook", "name": "pager", "url": pager.url, "matchers": ["rule=log_oom"]},
            {"type": "webhook", "name": "ops", "url": ops.url, "matchers": ["rule=state_unwritable"]}]


def unwritable_reported(d) -> None:
    wait_for(lambda: d.metrics().get("npu_watchdog_state_writable") == 0, what="npu_watchdog_state_writable 0")
    code, body = http_get(d.url + "/healthz")
    assert code == 200 and "state folder" in body, (code, body)
    assert any(f["rule"] == "state_unwritable" for f in d.status()["findings"])


def settle(d, rounds: int = 4) -> None:
    """A few probe rounds and group windows, so a message that should not exist would have come."""
    runs = {p["name"]: p["runs_total"] for p in d.status()["probes"]}
    wait_for(lambda: all(p["runs_total"] >= runs[p["name"]] + rounds for p in d.status()["probes"]),
             what=f"{rounds} more probe rounds")
    time.sleep(2)


def healed(d, pager: Receiver, ops: Receiver, state: Path) -> None:
    """After the fault: the held page once, `state_unwritable` fired and resolved once, the state
    private on disk, the folder's lock taken."""
    pager.wait_for(1)
    ops.wait_for(2)
    wait_for(lambda: d.metrics().get("npu_watchdog_state_writable") == 1, what="npu_watchdog_state_writable 1")
    settle(d)
    assert d.alive()
    assert paged_ranks(pager) == [("firing", "log_oom", "0")]
    assert paged_ranks(ops) == [("firing", "state_unwritable", ""), ("resolved", "state_unwritable", "")]
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(state / "alerting.sqlite3").st_mode) == 0o600
    wait_for(lambda: os.path.exists(state / "daemon.lock"), what="the folder's lock")
    assert "Traceback" not in d.log()
    assert d.log().count("alert log_oom firing") == 1, "a retried pass logs its alert once"


@pytest.mark.slow
@pytest.mark.parametrize("by", ["blocks", "inodes"])
def test_a_full_disk_at_boot_with_no_state_folder_yet_keeps_the_daemon_up(make_daemon, tmp_path, by) -> None:
    """Row 12: the state folder does not exist yet and its disk is full (of blocks: the folder is
    made, the database cannot be; of inodes: not even the folder). The daemon starts on memory-only
    alert state, says `state_unwritable`, holds the page of a failure line and sends it once the
    disk has room."""
    (rank0,) = watched_logs(tmp_path, 0)
    disk = SmallDisk(tmp_path / "disk", inodes=by == "inodes")
    state = tmp_path / "disk" / "state"
    try:
        disk.fill()
        with Receiver("webhook") as pager, Receiver("webhook") as ops:
            cfg = log_config(tmp_path, two_channels(pager, ops))
            cfg["paths"]["state_dir"] = str(state)
            d = make_daemon(cfg)
            ops.wait_for(1)
            unwritable_reported(d)
            followed(d)
            with open(rank0, "ab") as fh:
                fh.write(OOM)
            settle(d)
            assert d.alive() and pager.accepted() == [], "the page cannot be committed yet: it waits"
            disk.free()
            healed(d, pager, ops, state)
            assert "could not be opened at start; it is opened now" in d.log()
            d.stop()
    finally:
        disk.cleanup()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["immutable", "mount"])
def test_a_state_folder_read_only_right_after_the_database_was_created(make_daemon, tmp_path, how) -> None:
    """Row 13: the database file exists but is empty (created, then the folder turned read-only
    before its tables were written) and a failure line already waits in a watched log. The daemon
    starts, holds the page while the folder is read-only and sends it, once, when it is writable."""
    (rank0,) = watched_logs(tmp_path, 0)
    with open(rank0, "ab") as fh:
        fh.write(OOM)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    # What a daemon leaves that was stopped right after it made the database: its lock, the file.
    for name in ("daemon.lock", "alerting.sqlite3"):
        os.close(os.open(state / name, os.O_CREAT | os.O_WRONLY, 0o600))
    fault = ReadOnly(how, state)
    fault.on()
    try:
        with Receiver("webhook") as pager, Receiver("webhook") as ops:
            cfg = log_config(tmp_path, two_channels(pager, ops))
            cfg["probes"]["logs"]["sources"][0]["start"] = "beginning"  # the line was there before the start
            d = make_daemon(cfg)
            ops.wait_for(1)
            unwritable_reported(d)
            settle(d)
            assert d.alive() and pager.accepted() == [], "the page cannot be committed yet: it waits"
            fault.off()
            healed(d, pager, ops, state)
            d.stop()
    finally:
        fault.cleanup()


# -- a taken port ------------------------------------------------------------------------------------

SQUATTER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("up", flush=True)
srv.serve_forever()
"""


@pytest.mark.slow
def test_a_port_taken_at_start_is_retried_and_the_pages_go_out_meanwhile(make_daemon, tmp_path, procs) -> None:
    """Row 7: another user's process holds the daemon's port (and answers /healthz 200) before
    the daemon starts. The daemon runs on: the journal says it cannot listen, a failure line is
    paged, and once the squatter is gone the daemon listens on the port itself."""
    (rank0,) = watched_logs(tmp_path, 0)
    with Receiver("webhook") as pager:
        d = make_daemon(log_config(tmp_path, [{"type": "webhook", "name": "pager", "url": pager.url}]), start=False)
        # The system's Python: the other user may not reach the test's own interpreter.
        python = shutil.which("python3", path="/usr/bin:/bin")
        if python is None:
            pytest.skip("no /usr/bin/python3 for the other user's squatter")
        squatter = procs([python, "-c", SQUATTER, str(d.port)], stdout=subprocess.PIPE, preexec_fn=as_other_user)
        assert squatter.stdout.readline() == b"up\n"
        d.start(wait=False)
        wait_for(lambda: "cannot listen on" in d.log(), what="the error in the journal")
        wait_for(lambda: "first probe round complete" in d.log(), what="the first round")
        with open(rank0, "ab") as fh:
            fh.write(OOM)
        pager.wait_for(1)
        assert d.proc.poll() is None, d.log()
        squatter.kill()
        squatter.wait()
        wait_for(lambda: "listening on 127.0.0.1:%d after" % d.port in d.log(), timeout=120,
                 what="the port taken once free")
        wait_for(lambda: "npu_watchdog_" in http_get(d.url + "/metrics")[1], what="the daemon's own /metrics")
        assert d.metrics()['npu_watchdog_log_files_followed{source="train"}'] == 1
        time.sleep(3)
        assert paged_ranks(pager) == [("firing", "log_oom", "0")]
        assert d.log().count("cannot listen on") == 1, "said once, not at every attempt"
        assert d.stop() == 0

"""Snapshots under hostile input: long log lines, a collector that hangs, a stop mid-capture.

A snapshot runs beside the probes in the same process; it must never freeze them, the HTTP
endpoint or shutdown (issue: one 30 KB hex line froze the whole daemon for 45 s).
"""

from __future__ import annotations

import json
import os
import signal
import tarfile
import threading
import time
from pathlib import Path

from tests.helpers import http_get, wait_for
from watchdog.privacy.redact import MAX_LINE_CHARS, REDACTED, Redactor


def _manifest(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        top = os.path.basename(str(archive))[: -len(".tar.gz")]
        return json.load(tar.extractfile(f"{top}/manifest.json"))


def _redact_within(text: str, bound: float) -> str:
    """Redact in a thread; a result must come within `bound` (a hang bound, not a speed target)."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("out", Redactor(["s3cr3t-value"]).text(text)), daemon=True)
    t.start()
    t.join(bound)
    assert "out" in box, f"redaction of {len(text)} characters did not finish within {bound}s"
    return box["out"]


def test_a_long_hex_line_is_redacted_without_freezing():
    hexline = "deadbeef0123456789" * 2000  # 36 KB of name characters, the old quadratic case
    out = _redact_within(f"{hexline} api_token=abc s3cr3t-value\nnext password=hunter2\n", 20.0)
    lines = out.splitlines()
    assert len(lines[0]) < MAX_LINE_CHARS + 100 and "characters of this line cut" in lines[0]
    assert "s3cr3t-value" not in out and "abc" not in lines[0][-200:]
    assert lines[1] == f"next password={REDACTED}"


def test_a_long_line_under_the_cut_is_still_redacted_in_full():
    body = "x" * (MAX_LINE_CHARS - 200)
    out = _redact_within(f"{body} token={'a' * 50} https://u:pw123456@host/p s3cr3t-value\n", 20.0)
    assert out == f"{body} token={REDACTED} https://u:{REDACTED}@host/p {REDACTED}\n"


def test_secrets_spanning_the_chunk_boundary_are_found():
    from watchdog.privacy import redact

    line = "y" * 99 + "\n"
    filler = line * (redact.CHUNK_CHARS // len(line)) + "z" * (redact.CHUNK_CHARS % len(line) - 5)
    out = _redact_within(filler + "s3cr3t-value and more\n" + "ok\n", 20.0)
    assert "s3cr3t" not in out and out.endswith(f"z{REDACTED} and more\nok\n")


def _slow_npu_smi(tmp_path: Path) -> Path:
    """An npu-smi that never answers (a wedged driver) and says when it was started."""
    script = tmp_path / "npu-smi"
    script.write_text("#!/bin/sh\necho $$ >> %s\nexec sleep 120\n" % (tmp_path / "npu-smi.pids"))
    script.chmod(0o755)
    return script


def _kill_pids(path: Path) -> None:
    if not path.exists():
        return
    for line in path.read_text().split():
        try:
            os.kill(int(line), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def test_a_secret_in_a_url_query_is_redacted_and_other_parameters_are_kept():
    """`https://...` reads as an assignment named `https`, which once hid every query parameter
    after it: DingTalk's access_token, WeCom's key and a signed URL's sign, logged by a client,
    must not reach a snapshot or a message."""
    r = Redactor()
    lines = {
        "POST https://oapi.dingtalk.com/robot/send?access_token=0123456789abcdef&x=1 -> 200":
            "POST https://oapi.dingtalk.com/robot/send?access_token=[REDACTED]&x=1 -> 200",
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6-7xxx failed":
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=[REDACTED] failed",
        "url=https://hooks.example/b?timestamp=17&sign=c2lnbmF0dXJl": "url=https://hooks.example/b?timestamp=17&sign=[REDACTED]",
        "GET /api/status?page=2&sort=asc": "GET /api/status?page=2&sort=asc",
    }
    for line, want in lines.items():
        assert r.text(line) == want
    assert REDACTED not in r.text("?" + "a" * 100_000 + "&" * 50_000)  # no match, and linear


def test_snapshot_with_hex_log_keeps_healthz_and_stops_within_five_seconds(make_daemon, tmp_path):
    snaps = tmp_path / "snaps"
    log = tmp_path / "train.log"
    with open(log, "w") as fh:
        for i in range(60):  # 60 lines of 30 KB hex: 1.8 MB, minutes of redaction before the fix
            fh.write(f"{i:x}" + os.urandom(15000).hex() + "\n")
    npu_smi = _slow_npu_smi(tmp_path)
    d = make_daemon({
        "paths": {"state_dir": str(tmp_path / "state"), "snapshot_dir": str(snaps)},
        "probes": {
            "npu": {"npu_smi": str(npu_smi), "command_timeout": "60s"},
            "logs": {"sources": [{"name": "train", "paths": [str(log)]}]},
            "commands": [{"name": "fs_gone", "argv": ["/bin/false"], "interval": "1s", "timeout": "5s",
                          "severity": "critical"}],
        },
        "snapshots": {"enabled": True, "min_free_space": "1MiB", "budget": "60s", "dmesg_lines": 0,
                      "log_tail_size": "4MiB"},
    })
    try:
        # The capture is under way once it has called npu-smi (which hangs).
        wait_for(lambda: (tmp_path / "npu-smi.pids").exists(), timeout=60, what="the snapshot calling npu-smi")
        time.sleep(1.0)
        for _ in range(5):  # the endpoint answers while the capture runs
            code, body = http_get(d.url + "/healthz", timeout=5.0)
            assert code == 200, body
            time.sleep(0.5)
        t0 = time.monotonic()
        d.signal(signal.SIGTERM)
        d.proc.wait(timeout=40)
        took = time.monotonic() - t0
    finally:
        _kill_pids(tmp_path / "npu-smi.pids")
    assert d.proc.returncode == 0, d.log()
    # A hang bound, not a speed figure (a loaded machine stretches it): a stop that waited for the
    # hung npu-smi (60 s timeout) or the snapshot budget (60 s) would take over a minute.
    assert took < 30.0, f"stop took {took:.1f}s mid-snapshot\n{d.log()}"
    archives = sorted(snaps.glob("*.tar.gz"))
    assert len(archives) == 1, (archives, d.log())
    m = _manifest(archives[0])
    assert m["complete"] is False and m["stopped_early"] is True
    npu_item = [i for i in m["items"] if i["name"] == "npu-smi"][0]
    assert npu_item["status"] == "missing"
    assert npu_item["problems"][0]["reason"] == "stopping"

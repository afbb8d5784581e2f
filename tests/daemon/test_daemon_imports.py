"""What the running daemon has imported: only what it uses (each unused library is resident memory).

Counted, not timed. The real daemon runs (`npu-watchdog run`, discovery on as shipped, a channel
configured) under a small runner that, when the test asks (a file appears), writes which of some
modules the process has loaded. requests and urllib3 (~5 MB) are needed only to send: a daemon
whose channels have sent nothing must not carry them.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import Daemon, free_port, openssl_mapped, wait_for

RUNNER = r"""
import json, os, runpy, sys, threading, time
ask, out, wanted = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
def answer():
    while not os.path.exists(ask):
        time.sleep(0.05)
    with open(out + ".tmp", "w") as fh:
        json.dump(sorted(m for m in wanted if m in sys.modules), fh)
    os.replace(out + ".tmp", out)
threading.Thread(target=answer, daemon=True).start()
sys.argv = ["npu-watchdog"] + sys.argv[sys.argv.index("-m") + 2:]
runpy.run_module("watchdog", run_name="__main__", alter_sys=True)
"""

#: Loaded only by what uses them; asyncio, ssl and multiprocessing by nothing in the daemon (from
#: Python 3.9 on: APScheduler takes stand-ins for them, watchdog/scheduling/aps.py).
LAZY = ("requests", "urllib3", "watchdog.alerting.deliver.httpclient") + (
    ("asyncio", "ssl", "multiprocessing") if sys.version_info >= (3, 9) else ())


def loaded_after_rounds(tmp_path, rounds: int = 1):
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    ask, out = tmp_path / "ask", tmp_path / "loaded.json"
    cfg = {
        # Discovery as shipped, kept to jobs carrying this test's own marker: a training job run
        # on the machine by other work must not make it page (and so import requests).
        "discovery": {"enabled": True, "only_env": f"NPU_WATCHDOG_TEST_MARK={uuid.uuid4().hex}"},
        "alerting": {"channels": [{"type": "webhook", "name": "ops",
                                   "url": f"http://127.0.0.1:{free_port()}/hook"}]},
    }
    d = Daemon(tmp_path, cfg, wrapper=(sys.executable, str(runner), str(ask), str(out), ",".join(LAZY)))
    with d:
        wait_for(lambda: d.status() and all(p["runs_total"] >= rounds for p in d.status()["probes"]),
                 timeout=60, what=f"{rounds} rounds of every probe")
        ask.write_text("")
        wait_for(out.exists, timeout=10, what="the runner's answer")
        status = d.status()
        log = d.log()
    return json.loads(out.read_text()), status, log


def test_a_daemon_that_has_sent_nothing_has_not_imported_requests(tmp_path):
    loaded, status, log = loaded_after_rounds(tmp_path)
    assert status["findings"] == [] and status["discovery"]["jobs"] == [], status
    assert loaded == [], (loaded, log[-2000:])


#: Plugin packages the config must not load: the composition root hands their declarations down.
PLUGIN_PACKAGES = ("watchdog.probes", "watchdog.detectors", "watchdog.summaries", "watchdog.metrics",
                   "watchdog.alerting")


def _loaded_by(statement: str) -> list:
    import subprocess

    code = (f"import sys\n{statement}\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m == 'watchdog' or m.startswith('watchdog.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.split()


def test_the_config_schema_loads_no_plugin_module():
    """`import watchdog.config.schema` alone loads no probe, detector, summary, metric or channel
    module (it loaded 79 modules when the config looked the probe modules up itself)."""
    loaded = _loaded_by("import watchdog.config.schema")
    plugins = [m for m in loaded if m.startswith(PLUGIN_PACKAGES)]
    assert plugins == [], plugins
    assert "watchdog.config.schema" in loaded


def test_the_count_sees_plugin_modules_when_the_root_loads():
    """The counter itself: importing the composition root loads every plugin module it lists."""
    loaded = _loaded_by("import watchdog.plugins_list")
    assert {"watchdog.probes.npu", "watchdog.detectors.stall", "watchdog.alerting.deliver.channels.feishu"} <= set(loaded)


#: Answers each time the ask file appears (and removes it): which of the modules the process holds.
ASKING_RUNNER = r"""
import json, os, runpy, sys, threading, time
ask, out, wanted = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
def answer():
    while True:
        if os.path.exists(ask):
            with open(out + ".tmp", "w") as fh:
                json.dump(sorted(m for m in wanted if m in sys.modules), fh)
            os.replace(out + ".tmp", out)
            os.unlink(ask)
        time.sleep(0.05)
threading.Thread(target=answer, daemon=True).start()
sys.argv = ["npu-watchdog"] + sys.argv[sys.argv.index("-m") + 2:]
runpy.run_module("watchdog", run_name="__main__", alter_sys=True)
"""

HCCL_TIMEOUT = ("[E ProcessGroupHCCL.cpp:566] [Rank 3] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=12, "
                "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800102 milliseconds before timing out.")
NPU_OOM = ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity; 58.10 GiB "
           "already allocated; 58.20 GiB reserved in total by PyTorch)")


def test_a_quiet_log_is_matched_without_re2_and_a_burst_loads_it(tmp_path):
    """RE2 (2.6 MB resident as a library, its compiled rules and DFA more) is loaded by the first
    slice of 64 KiB or more; a log read a few lines at a time is matched on the literal path, with
    the same findings. Both slices' failures page, once each."""
    from watchdog.logrules.matcher import re2_available

    if not re2_available():
        pytest.skip("google-re2 is not installed in this interpreter")
    runner, ask, out = tmp_path / "runner.py", tmp_path / "ask", tmp_path / "loaded.json"
    runner.write_text(ASKING_RUNNER)
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "train-rank0.log"
    log.write_bytes(b"")

    def loaded():
        out.unlink() if out.exists() else None
        ask.write_text("")
        wait_for(out.exists, timeout=10, what="the runner's answer")
        return json.loads(out.read_text())

    def append(text: str) -> None:
        with open(log, "a") as fh:
            fh.write(text)

    step = "iteration {:7d}/ 100000 | lm loss: 2.000000E+00 | loss scale: 65536.0 | grad norm: 1.100 |\n"
    with Receiver("webhook") as pager:
        cfg = {"probes": {"logs": {"enabled": True, "interval": "1s", "hold": "1h",
                                   "sources": [{"name": "train", "paths": [str(logs / "*.log")]}]}},
               "alerting": {"group_window": "300ms", "channels": [{"type": "webhook", "name": "pager", "url": pager.url}]}}
        d = Daemon(tmp_path, cfg, wrapper=(sys.executable, str(runner), str(ask), str(out), "re2"))
        with d:
            wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
            for i in range(20):  # a few lines per round, as a training job prints them
                append(step.format(i))
                time.sleep(0.05)
            append(HCCL_TIMEOUT + "\n")
            pager.wait_for(1)
            assert loaded() == [], d.log()[-2000:]
            # A burst: 1,200 steps at once (about 130 KB), the OOM at its end.
            append("".join(step.format(i) for i in range(20, 1220)) + NPU_OOM + "\n")
            pager.wait_for(2)
            assert loaded() == ["re2"], d.log()[-2000:]
            lines = d.metrics()['npu_watchdog_log_lines_read_total{source="train"}']
        got = [(r.json["status"], a["labels"]["alertname"], a["labels"]["log_rule"])
               for r in pager.accepted() for a in r.json["alerts"]]
    assert got == [("firing", "log_hccl", "hccl_collective_watchdog_timeout"),
                   ("firing", "log_oom", "oom_torch_npu")], got
    assert lines == 1222


def _self_signed(tmp_path) -> tuple:
    """A certificate for 127.0.0.1 made by the openssl command (skip without it)."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def test_an_idle_daemon_holds_no_openssl_and_its_first_https_page_still_arrives(tmp_path):
    """OpenSSL (libssl, libcrypto: about 5 MB resident) is loaded by the first HTTPS send, not by
    the idle daemon: its endpoint does not import `http.server` (which imports `ssl`), APScheduler
    takes stand-ins for asyncio (which imports `ssl`), pydantic's core is imported with `ssl`
    hidden (on 3.8 it imports asyncio), and digests and HMAC use CPython's own SHA (pydantic's
    `secrets` would load `_hashlib`). The page then goes out over TLS, verified against the test's
    own certificate, once, with its labels; and the Feishu-style signature is checked by the
    receiver (a wrong HMAC would be refused)."""
    cert, key = _self_signed(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "train-rank0.log"
    log.write_bytes(b"")
    with Receiver("feishu", secret="s3cret", tls=(cert, key)) as pager:
        cfg = {"probes": {"logs": {"enabled": True, "interval": "1s", "hold": "1h",
                                   "sources": [{"name": "train", "paths": [str(logs / "*.log")]}]}},
               "alerting": {"group_window": "300ms",
                            "channels": [{"type": "feishu", "name": "pager", "url": pager.url, "secret": "s3cret"}]}}
        d = Daemon(tmp_path, cfg, env={"REQUESTS_CA_BUNDLE": cert})
        with d:
            wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="train"}') == 1, what="followed")
            wait_for(lambda: all(p["runs_total"] >= 2 for p in d.status()["probes"]), what="two rounds of every probe")
            idle = openssl_mapped(d.proc.pid)
            with open(log, "a") as fh:
                fh.write(HCCL_TIMEOUT + "\n")
            pager.wait_for(1)
            after = openssl_mapped(d.proc.pid)
            time.sleep(1.0)  # a second message would have been sent by now (group window 300 ms)
            sent = pager.accepted()
    assert idle == [], (idle, d.log()[-2000:])
    assert any(name.startswith("libssl") for name in after), after
    assert len(sent) == 1, [r.text for r in sent]
    card = sent[0].text
    assert "hccl" in card.lower() and "rank" in card.lower(), card[:2000]

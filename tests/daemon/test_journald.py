"""Under systemd, log lines carry syslog priority prefixes so `journalctl -p err` finds errors;
anywhere else (a terminal, a file, an inherited JOURNAL_STREAM that is not our stderr) they don't.

The journal is simulated by what systemd does: stderr is a stream whose device:inode is in
$JOURNAL_STREAM. Here that stream is a real file the child process writes to.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO

SNIPPET = """
import logging
from watchdog.service.logsetup import setup_logging
setup_logging("debug", {fmt!r})
log = logging.getLogger("watchdog.test")
log.debug("d"); log.info("i"); log.warning("w"); log.error("e")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("boom")
"""


def run(tmp_path, fmt="text", matching=True):
    out = tmp_path / "stderr.log"
    with open(out, "wb") as fh:
        st = os.fstat(fh.fileno())
        ino = st.st_ino if matching else st.st_ino + 1
        env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{ino}", PYTHONPATH=str(REPO))
        subprocess.run([sys.executable, "-c", SNIPPET.format(fmt=fmt)], stderr=fh, env=env, check=True, timeout=60)
    return out.read_text().splitlines()


def test_priority_prefix_on_the_journal_stream(tmp_path):
    lines = run(tmp_path)
    prefixes = [ln[:3] for ln in lines]
    assert prefixes[:4] == ["<7>", "<6>", "<4>", "<3>"]
    assert lines[3].endswith("watchdog.test: e")
    # every line of the traceback is an error entry too
    assert len(lines) > 5 and all(ln.startswith("<3>") for ln in lines[4:])
    assert any("ZeroDivisionError" in ln for ln in lines[4:])


def test_json_lines_get_the_prefix_too(tmp_path):
    lines = run(tmp_path, fmt="json")
    assert lines[3].startswith('<3>{"time"')


def test_no_prefix_when_stderr_is_not_the_journal(tmp_path):
    lines = run(tmp_path, matching=False)
    assert lines and not any(ln.startswith("<") for ln in lines)

"""The daemon catches SIGHUP and SIGTERM before its port answers. They were installed just after
the HTTP server started: a reload sent as soon as /healthz answered (a test on a loaded machine,
a script restarting then reloading) met Python's default for SIGHUP, which ends the process, and
the port went dead. In-process, the HTTP start stands in: it looks at the handlers and stops the
run there."""

from __future__ import annotations

import signal

import pytest

from watchdog.config import load_config_text
from watchdog.daemon import Daemon

SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)


class _Stop(Exception):
    pass


def test_the_signal_handlers_are_in_place_when_the_port_starts(tmp_path, monkeypatch):
    seen = {}

    def start_http(self, config, registry, quiet=False):
        seen.update({sig: signal.getsignal(sig) for sig in SIGNALS})
        raise _Stop

    monkeypatch.setattr(Daemon, "_start_http", start_http)
    config = load_config_text(f"paths:\n  state_dir: {tmp_path / 'state'}\nhttp:\n  listen: 127.0.0.1:0\n")
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    d = Daemon(config, str(tmp_path / "config.yaml"))
    try:
        with pytest.raises(_Stop):
            d.run()
    finally:
        d.stop()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert seen, "the daemon never reached its HTTP start"
    for sig in (signal.SIGHUP, signal.SIGTERM):
        assert seen[sig] not in (signal.SIG_DFL, signal.SIG_IGN, None, saved[sig]), (sig, seen[sig])

"""A reload's probes that never run are discarded, never closed as if they had run.

Closing a logs probe saves its offsets; one built for a reload has read nothing, so closing it
wrote empty offsets over the running probe's file (tests/daemon/test_reload_offsets.py shows what
that lost). A reload superseded by a newer SIGHUP, or dropped as overdue, left its probes open
instead: the discovered process probe's exit listener (a netlink socket and a thread) and the
logs probe's change watch, one set per dropped reload.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import List

from watchdog.config.load import load_config_text
from watchdog.probes.base import Collected, Probe
from watchdog.probes.logs import OFFSETS_FILE, LogsProbe
from watchdog.runtime import Runtime
from watchdog.service.sdnotify import Notifier
from watchdog.wiring.reload import Prepared, Reloader


class Recording(Probe):
    name = "recording"
    interval = 10.0
    timeout = 1.0

    def __init__(self, events: List[str], n: int):
        self.events, self.n = events, n

    def collect(self) -> Collected:  # pragma: no cover - never run
        raise AssertionError("a reload's probe ran")

    def close(self) -> None:
        self.events.append(f"close {self.n}")

    def discard(self) -> None:
        self.events.append(f"discard {self.n}")


def test_a_superseded_reloads_probes_are_discarded_and_the_last_one_is_handed_over(tmp_path):
    (tmp_path / "c.yaml").write_text("node: {name: n}\njob: {name: j}\n")
    config = load_config_text("node: {name: n}\njob: {name: j}\n")
    events: List[str] = []
    built = iter(range(1, 10))
    gate = threading.Event()

    def build(_config):
        n = next(built)
        gate.wait(30)  # both reloads are in flight before either result is taken
        return [Recording(events, n)]

    arrived: "queue.SimpleQueue[None]" = queue.SimpleQueue()
    r = Reloader(str(tmp_path / "c.yaml"), lambda: config, build, lambda: arrived.put(None),
                 Runtime(config=config, state=None, engine=None), Notifier(""), lambda: "status")
    r.start()
    r.start()  # a second SIGHUP while the first reload is still reading
    gate.set()
    arrived.get(timeout=30)
    arrived.get(timeout=30)
    (kept,) = r.outcomes()
    assert isinstance(kept, Prepared) and len(kept.probes) == 1
    # the two reload threads may build in either order: the one not handed over is discarded
    (other,) = {1, 2} - {kept.probes[0].n}
    assert events == [f"discard {other}"], events


def _logs_probe(tmp_path) -> LogsProbe:
    cfg = load_config_text(
        f"probes: {{logs: {{enabled: true, sources: [{{name: train, paths: ['{tmp_path}/rank*.log']}}]}}}}")
    return LogsProbe(cfg.probes.logs, str(tmp_path / "state"))


def test_the_running_logs_probe_keeps_its_offsets_file_when_it_adopts_a_reload(tmp_path):
    (tmp_path / "state").mkdir()
    log = tmp_path / "rank0.log"
    log.write_text("step 1\n")
    running = _logs_probe(tmp_path)
    running.collect()  # follows from the end
    with open(log, "a") as fh:
        fh.write("step 2\n")
    running.collect()
    saved = json.loads((tmp_path / "state" / OFFSETS_FILE).read_text())["files"]
    assert saved[str(log)]["offset"] == log.stat().st_size
    assert running.reconfigure(_logs_probe(tmp_path))  # what a reload does
    assert json.loads((tmp_path / "state" / OFFSETS_FILE).read_text())["files"] == saved
    running.close()

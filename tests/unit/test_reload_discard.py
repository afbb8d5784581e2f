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
from watchdog.probes.logs import OFFSETS_FILE
from tests.probe_kit import logs_probe
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


def test_the_running_logs_probe_keeps_its_offsets_file_when_it_adopts_a_reload(tmp_path):
    (tmp_path / "state").mkdir()
    log = tmp_path / "rank0.log"
    log.write_text("step 1\n")
    running = logs_probe(tmp_path)
    running.collect()  # follows from the end
    with open(log, "a") as fh:
        fh.write("step 2\n")
    running.collect()
    saved = json.loads((tmp_path / "state" / OFFSETS_FILE).read_text())["files"]
    assert saved[str(log)]["offset"] == log.stat().st_size
    assert running.reconfigure(logs_probe(tmp_path))  # what a reload does
    assert json.loads((tmp_path / "state" / OFFSETS_FILE).read_text())["files"] == saved
    running.close()


def test_a_logs_probe_that_never_ran_leaves_the_saved_offsets_as_they_are(tmp_path):
    """Built and closed before its first round (a daemon stopped at once, a replaced probe): it
    read nothing, so it writes nothing; the offsets on disk stay the last ones saved."""
    (tmp_path / "state").mkdir()
    log = tmp_path / "rank0.log"
    log.write_text("step 1\n")
    first = logs_probe(tmp_path)
    first.collect()
    first.close()
    before = (tmp_path / "state" / OFFSETS_FILE).read_text()
    never_ran = logs_probe(tmp_path)
    never_ran.close()
    assert (tmp_path / "state" / OFFSETS_FILE).read_text() == before


def test_a_replacing_logs_probe_starts_where_the_replaced_one_stopped(tmp_path):
    """A reload that swaps the logs probe (discovery turned on or off) builds the new one while
    the old one still reads; the new one must start from the old one's last save, not from the
    file as it was when it was built: no line read twice, none skipped."""
    (tmp_path / "state").mkdir()
    log = tmp_path / "rank0.log"
    log.write_text("step 1\n")
    old = logs_probe(tmp_path)
    old.collect()
    new = logs_probe(tmp_path)  # built by the reload thread
    with open(log, "a") as fh:
        fh.write("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity)\n")
    assert [a.category for a in old.collect().value.active] == ["oom"]  # the old probe's last round
    old.close()
    with open(log, "a") as fh:
        fh.write("step 2\n")
    obs = new.collect().value
    # the OOM line was the old probe's; the new one carries its match over (saved with the
    # offsets) and reads only what came after
    assert new.tailer.stats["train"].lines_total == 1, "read a line the replaced probe had read"
    assert [(a.category, a.count) for a in obs.active] == [("oom", 1)]
    saved = json.loads((tmp_path / "state" / OFFSETS_FILE).read_text())["files"]
    assert saved[str(log)]["offset"] == log.stat().st_size
    new.close()


def test_discovery_turned_on_or_off_by_a_reload_swaps_the_logs_and_heartbeat_probes(tmp_path):
    """A plain probe must not take a discovered one's settings over (it would follow nothing):
    the reload swaps it for the new kind."""
    from watchdog.probes.discovered_logs import DiscoveredLogsProbe
    from watchdog.probes.heartbeat import DiscoveredHeartbeatProbe, HeartbeatProbe

    plain = logs_probe(tmp_path)
    discovered = DiscoveredLogsProbe.__new__(DiscoveredLogsProbe)  # its kind is what is checked
    assert plain.reconfigure(discovered) is False
    assert plain.reconfigure(logs_probe(tmp_path)) is True
    hb = HeartbeatProbe.__new__(HeartbeatProbe)
    assert hb.reconfigure(DiscoveredHeartbeatProbe.__new__(DiscoveredHeartbeatProbe)) is False
    plain.close()

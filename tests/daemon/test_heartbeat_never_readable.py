"""A heartbeat that was never readable: a FIFO, a link to /dev/zero, bytes that are not UTF-8, a
nesting too deep for the JSON decoder, plain text from a trainer's own format. It has no beat to
age, so it was never reported (only `npu_watchdog_heartbeat_read_errors_total` grew), and a hung
rank behind it never paged. Now each is `heartbeat_unreadable` after `unreadable_after`, while
healthy heartbeats beside them (one with a half-written last line) are not."""

from __future__ import annotations

import json
import os
import threading
import time

from tests.helpers import wait_for


def test_heartbeats_unreadable_from_the_start_are_reported(tmp_path, make_daemon):
    hb = tmp_path / "hb"
    hb.mkdir()
    os.mkfifo(hb / "rank0.json")
    os.symlink("/dev/zero", hb / "rank1.json")
    (hb / "rank2.json").write_bytes(b"\xff\xfe\x00\xc3(" * 100)
    (hb / "rank3.json").write_text("[" * 100000)
    (hb / "rank7.json").write_text("step=10 loss=2.31\n")
    stop = threading.Event()

    def beat():
        while not stop.is_set():
            for r, tail in ((4, '{"step": 1'), (6, "")):
                tmp = hb / f".r{r}.tmp"
                tmp.write_text(json.dumps({"step": int(time.time()), "time": time.time(), "phase": "train"}) + "\n" + tail)
                os.replace(tmp, hb / f"rank{r}.json")
            stop.wait(1)

    writer = threading.Thread(target=beat, daemon=True)
    writer.start()
    try:
        d = make_daemon({"probes": {"heartbeat": {"enabled": True, "interval": "1s", "paths": [str(hb / "rank*.json")],
                                                  "unreadable_after": "5s"}}})

        def unreadable():
            return {f["labels"]["rank"] for f in d.status()["findings"] if f["rule"] == "heartbeat_unreadable"}

        wait_for(lambda: unreadable() >= {"0", "1", "2", "3", "7"}, timeout=60, what="every unreadable heartbeat")
        time.sleep(3)
        assert unreadable() == {"0", "1", "2", "3", "7"}
        assert not [f for f in d.status()["findings"] if f["labels"].get("rank") in ("4", "6")]
        assert "Traceback" not in d.log()
    finally:
        stop.set()

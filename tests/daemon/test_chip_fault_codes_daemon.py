"""The real daemon following a device log (a log source a user configures for the device-os logs
the driver's log daemon writes) in which only the chip fault table knows the lines: bare
`event_id=0x...` records. Near misses first (no message), then a chip fault whose vendor level is
SeparateNPU, then a network port going down. Counts the messages each channel received and reads
the labels of what was sent."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for

#: Hex numbers in contexts where they are no chip fault (tests/unit/test_code_tables.py has more).
NEAR_MISSES = [
    "[EVENT] KERNEL(3551,sklogd):2025-03-01-10:00:01.000.001 [klogd.c:242][1.2] event_id=0x8C2FA009",
    "[ERROR] KERNEL(3551,sklogd):2025-03-01-10:00:01.000.002 [klogd.c:242][1.3] event_id=0x80000001",
    "[ERROR] RUNTIME(123,python):2025-03-01-10:00:01.000.003 task_id=0x80e18402, stream_id=3",
    "[INFO]     2024/01/10 03:29:09.354927 17      common/fault_code.go:871    delete FaultFrequency for event id 80E18402",
]
# The device-os klogd line shape (mind-cluster faultdiag tests: `... [klogd.c:242][583733.716915]
# event_id=0x80c78008`) with two other documented codes.
HBM_ISOLATION_FULL = "[ERROR] KERNEL(3551,sklogd):2025-03-01-10:00:05.350.235 [klogd.c:242][583733.716915] event_id=0x80e18402"
PORT_DOWN = "[ERROR] KERNEL(3551,sklogd):2025-03-01-10:00:09.120.001 [klogd.c:242][583737.486681] event_id=0x81078603"


def config(logs: Path, pager: Receiver) -> dict:
    return {
        "probes": {"logs": {"enabled": True, "interval": "1s", "rescan": "1s", "hold": "1h",
                            "sources": [{"name": "device", "kind": "plog",
                                         "paths": [str(logs / "device-os-*" / "*.log")]}]}},
        "alerting": {"group_window": "300ms", "resolve_delay": "1500ms", "retry_initial": "300ms",
                     "retry_max": "1s", "channels": [{"type": "webhook", "name": "pager", "url": pager.url}]},
    }


def alerts(rx):
    return [(r.json["status"], a["labels"]) for r in rx.accepted() for a in r.json["alerts"]]


def test_bare_chip_fault_event_ids_page_once_each_with_the_vendors_verdict(make_daemon, tmp_path: Path) -> None:
    logs = tmp_path / "slog"
    (logs / "device-os-0").mkdir(parents=True)
    log = logs / "device-os-0" / "device-os_20250301100000000.log"
    log.write_bytes(b"")
    with Receiver("webhook") as pager:
        d = make_daemon(config(logs, pager))
        wait_for(lambda: d.metrics().get('npu_watchdog_log_files_followed{source="device"}') == 1, what="followed")
        with open(log, "a") as fh:
            fh.write("".join(line + "\n" for line in NEAR_MISSES))
        lines = 'npu_watchdog_log_lines_read_total{source="device"}'
        wait_for(lambda: d.metrics().get(lines, 0) >= len(NEAR_MISSES), what="the near misses read")
        runs = d.status()["probes"]
        wait_for(lambda: sum(p["runs_total"] for p in d.status()["probes"]) >= sum(p["runs_total"] for p in runs) + 6,
                 what="a few more probe rounds")
        assert pager.accepted() == [] and not [f for f in d.status()["findings"] if f["rule"].startswith("log_")]

        # The port first: a device fault on the node inhibits HCCL findings (its usual symptoms).
        with open(log, "a") as fh:
            fh.write(PORT_DOWN + "\n")
        pager.wait_for(1)
        with open(log, "a") as fh:
            fh.write(HBM_ISOLATION_FULL + "\n")
        pager.wait_for(2)
        wait_for(lambda: len([f for f in d.status()["findings"] if f["rule"].startswith("log_")]) == 2,
                 what="both findings held")
        got = alerts(pager)
        assert [(s, l["alertname"], l["log_rule"], l["domain"], l["restart"]) for s, l in got] == [
            # NotHandleFault says nothing about the job: the hccl category's own verdict stands
            ("firing", "log_hccl", "code_chipfault_hccl", "network", "helps"),
            # SeparateNPU: the chip leaves service, a restart on it does not help
            ("firing", "log_device", "code_chipfault_device", "hardware", "no"),
        ], got
        by_rule = {f["rule"]: f for f in d.status()["findings"]}
        dev, net = by_rule["log_device"], by_rule["log_hccl"]
        assert "80E18402 HBM_ECC_ISOLATION_FULL" in dev["summary"] and "vendor level SeparateNPU" in dev["summary"]
        assert dev["details"]["code"]["level"] == "SeparateNPU" and "厂商处理级别：SeparateNPU" in dev["details"]["said"]["zh"]
        assert net["details"]["code"]["code"] == "81078603" and net["details"]["code"]["level"] == "NotHandleFault"
        runs = d.status()["probes"]
        wait_for(lambda: sum(p["runs_total"] for p in d.status()["probes"]) >= sum(p["runs_total"] for p in runs) + 6,
                 what="a few more probe rounds")
        assert len(pager.accepted()) == 2, alerts(pager)  # nothing else: no resolve within the hold

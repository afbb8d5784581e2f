"""Ascend chip fault codes on the shipped example config: a discovered job's CANN plog (found
through the ranks' `ASCEND_PROCESS_LOG_PATH`, named after a rank's pid) gets lines carrying hex
numbers that are no chip fault in their context, then the runtime's HBM uncorrectable-ECC report
with its event id. Real rank processes under a real-shaped launcher, a fake npu-smi, and a real
HTTP receiver per shipped channel (Feishu: warning and up; the ops webhook: critical). Counts the
messages per channel and reads the labels of what was sent.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers import wait_for
from tests.jobkit import ShippedNode

pytestmark = pytest.mark.slow
PAGE_BUDGET_S = 90

#: Hex numbers in contexts where they are no chip fault (tests/unit/test_code_tables.py has more).
NEAR_MISSES = [
    "[INFO] RUNTIME(2713,python):2025-01-08-11:48:01.000.001 [stream.cc:512]2722 task_id=0x80e01801, stream_id=3",
    "<exception_print>TIME:2023-06-10-13:16:11.401.636, device_id=0, stream_id=16, task_id=43, "
    "exception_code=0xb4060007, magic_type=0xab6528",
    "[EVENT] KERNEL(3551,sklogd):2025-01-08-11:48:02.000.001 [klogd.c:242][1.2] event_id=0x8C2FA009",
    "[INFO] DRV(2713,python):2025-01-08-11:48:03.000.001 alloc addr=0x80C98009 size=4096",
]
#: The runtime's report of an HBM uncorrectable error (its message as MindSpore's UCE handling
#: quotes it, in a plog line's frame): the vendor's level for 80E01801 is RestartBusiness.
UCE = ("[ERROR] RUNTIME(2713,python):2025-01-08-11:48:07.312.416 [stars_engine.cc:1543]2722 ProcHBMRas:"
       "HBM MULTI BIT ECC, Uncorrectable ECC, device_id=3, event_id=0x80e01801, time us=67672363666.")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = ShippedNode(tmp_path_factory.mktemp("chipfault"))
    try:
        wait_for(lambda: n.status()["discovery"]["enabled"], timeout=60, what="daemon up")
        yield n
    finally:
        n.stop()


def test_a_plog_chip_fault_pages_once_with_its_code_and_the_vendors_restart_verdict(node, tmp_path):
    name = "uce"
    alog = tmp_path / "alog"
    job = node.job(name, ranks=2, ASCEND_PROCESS_LOG_PATH=str(alog))
    with job:
        node.follow(job, name)
        plog_dir = alog / "debug" / "plog"
        plog_dir.mkdir(parents=True)
        plog = plog_dir / f"plog-{job.rank_pids()[0]}_20250108114800000.log"
        plog.write_text("[INFO] RUNTIME(2713,python):2025-01-08-11:48:00.000.001 [runtime.cc:100]2722 init ok\n")
        wait_for(lambda: node.metric('npu_watchdog_log_files_followed{source="plog"}') >= 1, timeout=60,
                 what="the plog followed")
        node.start_row()
        with open(plog, "a") as fh:
            fh.write("".join(line + "\n" for line in NEAR_MISSES))
        reads = node.metric('npu_watchdog_log_bytes_read_total{source="plog"}')
        wait_for(lambda: node.metric('npu_watchdog_log_bytes_read_total{source="plog"}') > reads, timeout=60,
                 what="the near misses read")
        time.sleep(6)  # a few log rounds and a group window: a message that should not exist would have
        assert node.counts() == {"feishu": 0, "hook": {"firing": 0, "resolved": 0}}, node.messages()
        assert not node.findings(name, "log_device"), node.findings(name, "log_device")

        with open(plog, "a") as fh:
            fh.write(UCE + "\n")
        (f,) = wait_for(lambda: node.findings(name, "log_device") or None, timeout=PAGE_BUDGET_S, what="log_device")
        wait_for(lambda: node.counts()["hook"]["firing"] >= 1 and node.counts()["feishu"] >= 1,
                 timeout=PAGE_BUDGET_S, what="the page on both channels")
        time.sleep(6)
        assert node.counts() == {"feishu": 1, "hook": {"firing": 1, "resolved": 0}}, node.messages()
        (labels,) = node.hook_alerts()
        assert labels["alertname"] == "log_device" and labels["training_job"] == name
        # the pack's wording matched first; the code on the line decides the restart verdict
        # (a device fault's default is may_help; the vendor restarts the job on 80E01801)
        assert (labels["log_rule"], labels["domain"], labels["restart"]) == ("device_hbm_ecc", "hardware", "helps")
        assert f["details"]["code"]["code"] == "80E01801" and f["details"]["code"]["level"] == "RestartBusiness"
        assert f["details"]["code"]["zh"] and f["details"]["code"]["kind"] == "hardware"
        assert "80E01801 HBM_MULTI_BIT_ECC" in f["summary"] and "vendor level RestartBusiness" in f["summary"]
        # the Feishu message (Chinese on the shipped config) names the code and its meaning in Chinese
        feishu = json.dumps([r.json for r in node.messages()["feishu"]], ensure_ascii=False)
        assert f"80E01801 HBM_MULTI_BIT_ECC：{f['details']['code']['zh']}" in feishu, feishu
        assert "厂商处理级别：RestartBusiness" in feishu, feishu

"""The real daemon with the kernel probe on this machine's /dev/kmsg, and real ranks that die:
a segfault, an OOM kill by a real memory cgroup, a SIGKILL with nothing in the kernel log.

The machine's kernel log holds other people's records (their segfaults and OOM kills become
node findings of this daemon too), so every assertion is scoped to this test's own job and pids.
"""

from __future__ import annotations

import json
import os
import signal
import tarfile
import time
from pathlib import Path

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.jobkit import MemoryCgroup, TrainJob, memory_cgroups_usable

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable")]


def config(job: TrainJob, hook: str) -> dict:
    return {
        "job": {},
        # No npu feed: no npu-smi here, and a job on a node without it pages npu_smi_missing.
        "discovery": {"enabled": True, "only_env": job.only_env, "forget_after": "60s", "interval": "1s",
                      "feed": ["process", "logs", "heartbeat"]},
        "probes": {"process": {"interval": "1s"}, "logs": {"interval": "1s", "rescan": "1s"}, "heartbeat": {"interval": "1s"},
                   "kernel": {"enabled": True, "interval": "1s"}},
        "alerting": {"group_window": "1s", "resolve_delay": "1m", "retry_initial": "300ms", "retry_max": "1s",
                     "channels": [{"type": "webhook", "name": "hook", "url": hook}]},
        "snapshots": {"enabled": False},
    }


def pages_about(rx, job: str, rank: str, status: str = "firing"):
    """Messages (webhook requests) with an alert about this job's rank."""
    out = []
    for r in rx.accepted():
        if r.json["status"] != status:
            continue
        mine = [a for a in r.json["alerts"]
                if a["labels"].get("training_job") == job and a["labels"].get("rank") == rank]
        if mine:
            out.append(mine)
    return out


def text_of(alerts) -> str:
    return json.dumps(alerts)


def rank_pid(d, rank: int) -> int:
    def find():
        for j in d.status()["discovery"]["jobs"]:
            for r in j["ranks"]:
                if r["rank"] == rank:
                    return r["pid"]
        return None
    return wait_for(find, timeout=20, what=f"rank {rank} discovered")


def started(d, job: TrainJob, name: str, ranks: int) -> None:
    key = f'npu_watchdog_job_ranks_alive{{training_job="{name}"}}'
    wait_for(lambda: d.metrics().get(key) == ranks, timeout=30, what="ranks followed by the process probe")
    wait_for(lambda: d.metrics().get('npu_watchdog_probe_up{probe="kernel"}') == 1, timeout=20,
             what="kernel probe up")


def test_segfault_pages_once_naming_the_rank_and_a_restart_does_not_replay(tmp_path, make_daemon):
    name = "segv-job"
    job = TrainJob(tmp_path / "j", ranks=2, env={"NPU_WATCHDOG_JOB": name, "ASCEND_RT_VISIBLE_DEVICES": "4,6"})
    with Receiver("webhook") as rx:
        d = make_daemon(config(job, rx.url))
        with job:
            started(d, job, name, 2)
            pid = rank_pid(d, 1)
            (job.ctl / "segv-1").touch()
            wait_for(lambda: pages_about(rx, name, "1"), timeout=30, what="a page for rank 1")
            time.sleep(4)  # the kernel finding and rank_missing are one event: nothing may follow
            pages = pages_about(rx, name, "1")
            assert len(pages) == 1, pages
            text = text_of(pages[0])
            assert "segfault at" in text and f"[{pid}]" in text, text
            assert {a["labels"]["alertname"] for a in pages[0]} <= {"kernel_crash", "rank_missing"}
            # The kernel's finding is the rank's: its job, rank and NPU (discovery's job model).
            (kf,) = [f for f in d.status()["findings"] if f["rule"] == "kernel_crash" and f["labels"].get("rank")]
            assert {k: kf["labels"][k] for k in ("training_job", "rank", "npu")} == \
                {"training_job": name, "rank": "1", "npu": "6"}
            assert kf["severity"] == "critical" and f"rank 1 (pid {pid})" in kf["summary"]
            m = d.metrics()
            segv = [v for k, v in m.items() if k.startswith("npu_watchdog_kernel_matches_total{")
                    and 'rule="kernel_segfault"' in k and 'category="crash"' in k]
            assert segv and segv[0] >= 1 and m["npu_watchdog_kernel_records_total"] > 0
            assert m["npu_watchdog_kernel_position_saved"] == 1
            st = json.loads((Path(d.config["paths"]["state_dir"]) / "kernel-kmsg.json").read_text())
            assert st["data"]["seq"] > 0
            assert any(e["pid"] == pid and e["rule"] == "kernel_segfault" for e in st["data"]["recent"])
            d.stop()
            before = len(rx.accepted())
            d.start()
            started(d, job, name, 1)
            time.sleep(5)  # a replayed record would page within a second or two
            assert len(pages_about(rx, name, "1")) == 1
            assert pages_about(rx, name, "1", "resolved") == []
            again = [r for r in rx.accepted()[before:] if f"[{pid}]: segfault" in json.dumps(r.json)]
            assert again == [], again


@pytest.mark.skipif(not memory_cgroups_usable(), reason="needs root and a memory cgroup controller")
def test_an_unreadable_kernel_log_is_a_probe_down(tmp_path, make_daemon):
    d = make_daemon({"probes": {"kernel": {"enabled": True, "interval": "1s", "device": str(tmp_path / "no-kmsg")}},
                     "alerting": {"for": {"probe_down": "0s"}}})
    wait_for(lambda: d.metrics().get('npu_watchdog_probe_up{probe="kernel"}') == 0, timeout=20, what="kernel probe down")

    def kernel():
        return next(p for p in d.status()["probes"] if p["name"] == "kernel")

    # probe_up is 0 from the start too (before the first round): wait for the round's error.
    wait_for(lambda: kernel()["last_error"], timeout=20, what="the kernel probe's first round")
    assert "cannot read the kernel log" in kernel()["last_error"]
    wait_for(lambda: any(f["rule"] == "probe_down" and f["labels"].get("probe") == "kernel" for f in d.status()["findings"]),
             timeout=20, what="probe_down finding")
    assert "cannot read the kernel log" in d.log()


def test_oom_kill_by_a_memory_cgroup_pages_once_naming_the_rank(tmp_path, make_daemon):
    name = "oom-job"
    job = TrainJob(tmp_path / "j", ranks=2, env={"NPU_WATCHDOG_JOB": name})
    with Receiver("webhook") as rx:
        d = make_daemon(config(job, rx.url))
        with job, MemoryCgroup(96 << 20) as cg:
            started(d, job, name, 2)
            pid = rank_pid(d, 0)
            cg.add(pid)
            (job.ctl / "oom-0").touch()
            wait_for(lambda: pages_about(rx, name, "0"), timeout=40, what="a page for rank 0")
            time.sleep(4)
            pages = pages_about(rx, name, "0")
            assert len(pages) == 1, pages
            text = text_of(pages[0])
            assert "out of memory" in text.lower() and f"process {pid}" in text, text
            d.stop()
            d.start()
            started(d, job, name, 1)
            time.sleep(5)
            assert len(pages_about(rx, name, "0")) == 1
            assert pages_about(rx, name, "0", "resolved") == []


def manifest(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        return json.load(tar.extractfile(f"{archive.name[: -len('.tar.gz')]}/manifest.json"))


def test_sigkill_without_kernel_or_log_line_pages_once_with_its_last_error_lines(tmp_path, make_daemon):
    name = "kill-job"
    job = TrainJob(tmp_path / "j", ranks=2, env={"NPU_WATCHDOG_JOB": name})
    words = ("loading shard 17 of /data/corpus\n"
             "ERROR dataloader: worker 3 could not read shard 17 (input/output problem) <!channel>\n"
             "RuntimeError: upload to the tracker failed with WANDB_API_KEY=abcd1234efgh5678\n"
             "waiting for the next shard\n")
    snaps = tmp_path / "snaps"
    with Receiver("webhook") as rx, Receiver("slack") as sl:
        cfg = config(job, rx.url)
        cfg["alerting"]["channels"].append({"type": "slack", "name": "sl", "url": sl.url})
        cfg["paths"] = {"state_dir": str(tmp_path / "state"), "snapshot_dir": str(snaps)}
        cfg["snapshots"] = {"enabled": True, "min_free_space": "1MiB", "budget": "10s", "dmesg_lines": 10,
                            "max_stack_processes": 0}
        d = make_daemon(cfg)
        with job:
            started(d, job, name, 2)
            pid = rank_pid(d, 1)
            tmp = job.ctl / "words.tmp"
            tmp.write_text(words)
            tmp.rename(job.ctl / "words-1")
            log = job.logs / "rank1.log"
            wait_for(lambda: "could not read shard 17" in log.read_text(), timeout=20, what="the rank's last words")
            time.sleep(2)  # read by the logs probe (events or its 1 s round)
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: pages_about(rx, name, "1"), timeout=30, what="a page for rank 1")
            time.sleep(3)
            pages = pages_about(rx, name, "1")
            assert len(pages) == 1, pages
            assert [a["labels"]["alertname"] for a in pages[0]] == ["rank_missing"]
            text = text_of(pages[0])
            assert "worker 3 could not read shard 17" in text, text
            assert "upload to" in text and "abcd1234efgh5678" not in text and "[REDACTED]" in text
            assert "segfault" not in text and "out of memory" not in text.lower()
            # Log text in a message is escaped for the channel's markup: no mention from a log line.
            wait_for(lambda: sl.accepted(), timeout=20, what="the Slack message")
            slack = json.dumps([r.json for r in sl.accepted()], ensure_ascii=False)
            assert len(sl.accepted()) == 1 and "could not read shard 17" in slack and "<!channel>" not in slack
            # The same cause is in the snapshot the page asked for.
            archive = wait_for(lambda: sorted(snaps.glob("*rank_missing.tar.gz")), timeout=60, what="snapshot")[0]
            cause = manifest(archive)["trigger"]["finding"]["details"]["cause"]
            assert cause["kind"] == "last_lines" and cause["source"] == str(job.logs / "rank1.log")
            assert any("worker 3 could not read shard 17" in x for x in cause["lines"])
            assert not any("abcd1234efgh5678" in x for x in cause["lines"])


def test_the_launchers_exit_report_names_the_signal_of_a_rank_killed_silently(tmp_path, make_daemon):
    """torchrun's output and the ranks' in one file (`torchrun ... > train.log 2>&1`): a rank killed
    by a signal leaves no line of its own; the launcher's report of its exit says why. (SIGTERM: the
    log rules already read torchrun's `exitcode: -9` as a host OOM kill, which pages on its own.)"""
    name = "launcher-job"
    job = TrainJob(tmp_path / "j", ranks=2, env={"NPU_WATCHDOG_JOB": name}, shared_log=True)
    with Receiver("webhook") as rx:
        cfg = config(job, rx.url)
        cfg["alerting"]["group_window"] = "3s"  # the launcher's line is read in the same window
        d = make_daemon(cfg)
        with job:
            started(d, job, name, 2)
            pid = rank_pid(d, 1)
            os.kill(pid, signal.SIGTERM)
            # The launcher prints its report just after reaping the rank, a moment after the
            # process probe may have judged the departure: then the rank pages as `left_alone`,
            # `end_window` (30 s) later (docs/discovery.md), with the report in its cause.
            wait_for(lambda: pages_about(rx, name, "1"), timeout=75, what="a page for rank 1")
            time.sleep(3)
            pages = pages_about(rx, name, "1")
            mine = [r for r in rx.accepted() if r.json["status"] == "firing" and name in json.dumps(r.json)]
            assert len(pages) == 1 and len(mine) == 1, mine
            text = text_of(pages[0])
            assert f"the launcher reports pid {pid} terminated (signal 15)" in text, text
            assert f"failed (exitcode: -15) local_rank: 1 (pid: {pid})" in text  # the line itself, as evidence


def test_a_segfault_seen_by_the_kernel_and_by_the_launchers_line_is_one_page(tmp_path, make_daemon):
    """`torchrun ... > train.log 2>&1`: the launcher's `exitcode: -11` line matches a log rule
    (log_crash) for the same death the kernel reported (kernel_crash): one event, one page."""
    name = "segv-shared"
    job = TrainJob(tmp_path / "j", ranks=2, env={"NPU_WATCHDOG_JOB": name}, shared_log=True)
    with Receiver("webhook") as rx:
        d = make_daemon(config(job, rx.url))
        with job:
            started(d, job, name, 2)
            pid = rank_pid(d, 1)
            (job.ctl / "segv-1").touch()
            log = job.logs / "train.log"
            wait_for(lambda: f"(exitcode: -11) local_rank: 1 (pid: {pid})" in log.read_text(), timeout=20,
                     what="the launcher's report")
            wait_for(lambda: [r for r in rx.accepted() if name in json.dumps(r.json)], timeout=30, what="a page")
            time.sleep(4)
            mine = [r.json for r in rx.accepted() if r.json["status"] == "firing" and name in json.dumps(r.json)]
            assert len(mine) == 1, mine
            # Whichever source the daemon read first pages, naming the death: the kernel's line
            # ("[pid]: segfault at") or the launcher's ("exitcode: -11 ... (pid: N)"); the other
            # folds into it (which comes first is a race between the two probes, not a promise).
            page = json.dumps(mine[0])
            assert f"[{pid}]: segfault at" in page or f"(exitcode: -11) local_rank: 1 (pid: {pid})" in page, page
            rules = {f["rule"] for f in d.status()["findings"] if f["labels"].get("training_job") == name}
            assert {"kernel_crash", "log_crash"} <= rules  # both seen, folded into one page

"""Issue "every finding belongs to the job that owns it", on the zero-config path: the daemon runs
the shipped example config (no `job`, `probes` or paths; a test that must be shorter merges only
time constants over it), real rank process trees (tests/fakes/trainjob), and the fake npu-smi whose
process table follows the ranks (tests.jobkit.FakeNpuNode). Each test counts the messages per
channel (firing and resolved) and checks the labels of what was sent: the right job's name, and
never a made-up default `training`.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Dict, List, Tuple

import pytest

from tests.fakes.receivers import Receiver
from tests.helpers import wait_for
from tests.jobkit import FakeNpuNode, ShippedDaemon, TrainJob, sent, webhook_labels

pytestmark = pytest.mark.slow

#: Shorter than the shipped 2 min so a 65 s hang is called; npu_idle (shipped: 10 min, then 1 min
#: `for`) would fire within the hang too, so the test shows it is the job's and folded into the
#: stall's page (same host and job labels: inhibited).
SHORT = {"stall": {"duration": "20s"}, "trends": {"idle_for": "20s"}, "alerting": {"for": {"npu_idle": "30s"}}}


def tagged() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def no_default_job(d: ShippedDaemon, hook: Receiver) -> None:
    """No alert sent and no served series names a job called `training` (none runs here)."""
    assert all(a.get("training_job") != "training" for a in webhook_labels(hook))
    assert 'training_job="training"' not in d.get("/metrics")
    assert all(f["labels"].get("training_job") != "training" for f in d.findings())


def discovered(d: ShippedDaemon, n_jobs: int, with_npus: bool = True) -> Dict[str, Dict]:
    """Wait until discovery reports the jobs (with their ranks' NPUs); name -> job."""
    def ready():
        jobs = d.jobs()
        if len(jobs) != n_jobs or (with_npus and not all(r["npu"] is not None for j in jobs for r in j["ranks"])):
            return None
        return {j["name"]: j for j in jobs}
    return wait_for(ready, timeout=60, what=f"{n_jobs} job(s) discovered")


def chips_seen(d: ShippedDaemon, n: int) -> None:
    """Wait until the npu probe has read `n` chips from npu-smi (a chip lost later is then missed)."""
    wait_for(lambda: any(p["name"] == "npu" and p["up"] and f"{n} chips" in (p["last_result"] or "")
                         for p in d.status()["probes"]), timeout=40, what="the npu probe seeing the chips")


def card_back(node: FakeNpuNode, hook: Receiver, fs: Receiver) -> Tuple[Dict, Dict]:
    """NPU 2 comes back: one resolved message on each channel, nothing else; the webhook's labels
    of the card's page and of its resolution."""
    node.lost.discard(2)
    node.refresh()
    wait_for(lambda: sent(hook, fs)["webhook"]["resolved"], timeout=150, what="the card's resolved message")
    time.sleep(5)  # a second message would come with the same or the next flush
    got = sent(hook, fs)
    assert got["webhook:npu_missing"] == {"firing": 1, "resolved": 1}, got
    assert got["webhook"] == {"firing": 1, "resolved": 1} and got["feishu"] == {"firing": 1, "resolved": 1}, got
    (lost, back) = [x for x in webhook_labels(hook) if x["alertname"] == "npu_missing"]
    return lost, back


def judged(d: ShippedDaemon, job: str) -> None:
    """Wait until the stall rule can judge the job (progress and device evidence arrived)."""
    wait_for(lambda: f'npu_watchdog_job_progress_age_seconds{{training_job="{job}"}}' in d.get("/metrics"),
             timeout=60, what="the job's progress age")


def test_collective_hang_of_65s_then_resume_is_one_page_and_one_resolve(tmp_path):
    """Row 1: 8 ranks under a torchrun-like launcher hang in a collective for 65 s, then train on:
    exactly one firing and one resolved `stall` per channel, labelled with the job; the idle NPUs
    of the hang are the job's (not `training`) and inhibited by its stall."""
    tag = tagged()
    job = TrainJob(tmp_path / "job", ranks=8, tag=tag, env={"NPU_WATCHDOG_HEARTBEAT": f"{tmp_path}/hb/"})
    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, job:
        node.place(job, 0)
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url, SHORT) as d:
            (name,) = discovered(d, 1)
            judged(d, name)
            time.sleep(5)
            assert sent(hook, fs)["webhook"] == {"firing": 0, "resolved": 0}
            job.hang()
            hung_at = time.monotonic()
            idle_seen: List[Dict] = []
            while time.monotonic() - hung_at < 65:
                idle_seen += [f for f in d.findings() if f["rule"] == "npu_idle"]
                time.sleep(1)
            job.resume()
            assert sent(hook, fs).get("webhook:stall", {}).get("firing") == 1, (sent(hook, fs), d.findings())
            wait_for(lambda: sent(hook, fs)["webhook"]["resolved"] and sent(hook, fs)["feishu"]["resolved"],
                     timeout=150, what="the resolved messages")
            time.sleep(15)  # anything else would have come by now
            got = sent(hook, fs)
            assert got["webhook"] == {"firing": 1, "resolved": 1} and got["feishu"] == {"firing": 1, "resolved": 1}, got
            assert got["webhook:stall"] == {"firing": 1, "resolved": 1}
            assert [(a["alertname"], a["training_job"]) for a in webhook_labels(hook)] == [("stall", name)] * 2
            assert all(name in r.text for r in fs.accepted())
            # The idle chips of the hang were the job's, 8 of them, and never paged (inhibited).
            assert idle_seen and {f["labels"].get("training_job") for f in idle_seen} == {name}
            assert {f["labels"]["npu"] for f in idle_seen} <= {str(n) for n in range(8)}
            no_default_job(d, hook)


def two_jobs(tmp_path, tag: str):
    """Job A: torchrun-like, 4 ranks on NPUs 0-3 (npu-smi lists them). Job B: a
    run_distribute_train.sh-style shell loop, RANK_ID/DEVICE_ID 4-7, which npu-smi does not list
    (as in a container): only its device variables attribute its chips."""
    a = TrainJob(tmp_path / "a", ranks=4, tag=tag, env={"NPU_WATCHDOG_HEARTBEAT": f"{tmp_path}/hb-a/"})
    b = TrainJob(tmp_path / "b", ranks=4, tag=tag, style="mindspore", first_device=4,
                 env={"NPU_WATCHDOG_HEARTBEAT": f"{tmp_path}/hb-b/"})
    return a, b


def by_launcher(jobs: Dict[str, Dict], a: TrainJob) -> tuple:
    (name_a,) = [n for n, j in jobs.items() if j["launcher"] and j["launcher"]["pid"] == a.proc.pid]
    (name_b,) = [n for n in jobs if n != name_a]
    return name_a, name_b


def test_two_jobs_one_hangs_pages_once_for_it_and_the_other_stays_silent(tmp_path):
    """Row 2: A hangs while B trains on: one `stall` for A on each channel, nothing for B,
    nothing labelled `training`; B's NPUs are its own by DEVICE_ID."""
    tag = tagged()
    a, b = two_jobs(tmp_path, tag)
    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, a, b:
        node.place(a, 0)
        node.place(b, 4, listed=False)
        with ShippedDaemon(tmp_path / "d", node.env(), a.only_env, fs.url, hook.url, SHORT) as d:
            jobs = discovered(d, 2)
            name_a, name_b = by_launcher(jobs, a)
            assert sorted(r["npu"] for r in jobs[name_b]["ranks"]) == [4, 5, 6, 7]
            assert sorted(r["npu"] for r in jobs[name_a]["ranks"]) == [0, 1, 2, 3]
            judged(d, name_a)
            judged(d, name_b)
            time.sleep(5)
            a.hang()
            wait_for(lambda: sent(hook, fs)["feishu"]["firing"] and sent(hook, fs)["webhook"]["firing"],
                     timeout=120, what="the stall page of job A")
            seen: List[Dict] = []
            for _ in range(50):  # past the hang's npu_idle (20 s idle + 30 s `for`)
                seen += d.findings()
                time.sleep(1)
            got = sent(hook, fs)
            assert got["webhook"] == {"firing": 1, "resolved": 0} and got["feishu"] == {"firing": 1, "resolved": 0}, got
            assert [(x["alertname"], x["training_job"]) for x in webhook_labels(hook)] == [("stall", name_a)]
            assert all(name_a in r.text and name_b not in r.text for r in fs.accepted())
            assert {f["labels"].get("training_job") for f in seen if f["rule"] in ("stall", "npu_idle")} == {name_a}
            idle = {f["labels"]["npu"] for f in seen if f["rule"] == "npu_idle"}
            assert idle and idle <= {"0", "1", "2", "3"}
            metrics = d.get("/metrics")
            assert f'npu_watchdog_job_stalled{{training_job="{name_a}"}} 1.0' in metrics
            assert f'npu_watchdog_job_stalled{{training_job="{name_b}"}} 0.0' in metrics
            no_default_job(d, hook)


def test_two_jobs_an_oom_cascade_pages_once_for_its_job_and_the_other_stays_silent(tmp_path):
    """A's rank 1 dies of NPU OOM, its peers then report an HCCL timeout and block: one page for
    A (the OOM; the missing rank, the HCCL errors and the idle chips are its symptoms), B silent.
    The shipped config, unchanged."""
    tag = tagged()
    a, b = two_jobs(tmp_path, tag)
    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, a, b:
        node.place(a, 0)
        node.place(b, 4, listed=False)
        with ShippedDaemon(tmp_path / "d", node.env(), a.only_env, fs.url, hook.url) as d:
            name_a, name_b = by_launcher(discovered(d, 2), a)
            time.sleep(8)  # the log probe follows the rank files (from their end: the jobs ran first)
            a.oom_cascade(1)
            wait_for(lambda: sent(hook, fs)["feishu"]["firing"] and sent(hook, fs)["webhook"]["firing"],
                     timeout=90, what="the OOM page")
            time.sleep(30)  # the cascade (rank gone, HCCL lines, idle chips) would page by now
            got = sent(hook, fs)
            assert got["webhook"] == {"firing": 1, "resolved": 0} and got["feishu"] == {"firing": 1, "resolved": 0}, got
            labels = webhook_labels(hook)
            assert {x["training_job"] for x in labels} == {name_a}
            assert "log_oom" in {x["alertname"] for x in labels}
            assert all(name_b not in r.text for r in fs.accepted())
            assert all(f["labels"].get("training_job") != name_b for f in d.findings())
            no_default_job(d, hook)


def test_npu_smi_appearing_later_is_picked_up_and_a_lost_card_pages_once(tmp_path):
    """Row 4: no npu-smi on PATH when the daemon starts while a job trains: `npu_smi_missing` once;
    npu-smi appears (a driver mounted after boot) and the next round uses it without a reload;
    then a card is lost: `npu_missing` for the job on it, once."""
    tag = tagged()
    job = TrainJob(tmp_path / "job", ranks=4, tag=tag, env={"NPU_WATCHDOG_HEARTBEAT": f"{tmp_path}/hb/"})
    with FakeNpuNode(tmp_path / "node", present=False) as node, Receiver("feishu") as fs, \
            Receiver("webhook") as hook, job:
        node.place(job, 0)
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url) as d:
            (name,) = discovered(d, 1, with_npus=False)
            wait_for(lambda: sent(hook, fs).get("webhook:npu_smi_missing", {}).get("firing"), timeout=60,
                     what="npu_smi_missing")
            missing = [x for x in webhook_labels(hook) if x["alertname"] == "npu_smi_missing"]
            assert "training_job" not in missing[0]  # the node's finding, no job's
            time.sleep(12)  # blind for more rounds: still one message
            assert sent(hook, fs)["webhook"] == {"firing": 1, "resolved": 0}
            node.install()
            chips_seen(d, 8)
            discovered(d, 1)  # the ranks' NPUs from npu-smi's process table now
            node.lose(2)
            wait_for(lambda: sent(hook, fs).get("webhook:npu_missing"), timeout=60, what="the lost card's page")
            wait_for(lambda: sent(hook, fs).get("webhook:npu_smi_missing", {}).get("resolved"), timeout=120,
                     what="npu_smi_missing resolved")
            time.sleep(10)
            got = sent(hook, fs)
            assert got["webhook:npu_smi_missing"] == {"firing": 1, "resolved": 1}, got
            assert got["webhook:npu_missing"] == {"firing": 1, "resolved": 0}, got
            assert got["webhook"] == {"firing": 2, "resolved": 1} and got["feishu"] == {"firing": 2, "resolved": 1}, got
            (lost,) = [x for x in webhook_labels(hook) if x["alertname"] == "npu_missing"]
            assert (lost["training_job"], lost["npu"]) == (name, "2")
            assert re.search(r"npu-smi", (tmp_path / "d" / "daemon.log").read_text())
            no_default_job(d, hook)


def test_a_lost_card_pages_once_while_its_job_restarts_around_it(tmp_path):
    """A card vanishes under a job; the job is killed and started again (a new launcher: a new
    job name) while the card stays gone, so the chip's holder changes. One page for the card,
    none for the old job's end (the card explains it), one resolved message when the card is back.
    The holder is context, not identity (Finding.context): its change must not make a second alert."""
    # The cards the launcher was given (a common way to pin a job): each rank's NPU is known from
    # its environment even when npu-smi cannot list it (its card is gone).
    job = TrainJob(tmp_path / "job", ranks=4, tag=tagged(),
                   env={"NPU_WATCHDOG_HEARTBEAT": f"{tmp_path}/hb/", "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"})

    def holders() -> List:
        return [f["labels"].get("training_job") for f in d.findings() if f["rule"] == "npu_missing"]

    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, job:
        node.place(job, 0)
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url) as d:
            (name,) = discovered(d, 1)
            # The environment names the ranks' cards before npu-smi is read: a card gone before the
            # probe's first reading was never seen, so it could not be missed (nothing to compare).
            chips_seen(d, 8)
            node.lose(2)
            wait_for(lambda: sent(hook, fs).get("webhook:npu_missing"), timeout=60, what="the lost card's page")
            job.stop()
            wait_for(lambda: d.jobs() == [], timeout=60, what="discovery seeing the job gone")
            time.sleep(2)  # the launcher's start time names the job: the new one's must differ
            job.start()
            (again,) = discovered(d, 1)
            assert again != name
            wait_for(lambda: holders() == [again], timeout=60, what="the lost card held by the new job")
            time.sleep(10)  # a second alert would have been sent by now
            got = sent(hook, fs)
            assert got["webhook:npu_missing"] == {"firing": 1, "resolved": 0}, got
            assert got["webhook"] == {"firing": 1, "resolved": 0} and got["feishu"] == {"firing": 1, "resolved": 0}, got
            lost, back = card_back(node, hook, fs)
            assert (lost["training_job"], lost["npu"], lost["_status"]) == (name, "2", "firing")
            assert (back["training_job"], back["npu"], back["_status"]) == (name, "2", "resolved")
            no_default_job(d, hook)


def test_a_card_still_gone_after_a_daemon_restart_stays_paged_and_unresolved(tmp_path):
    """A card is lost and paged; the daemon is restarted (an upgrade, a crash) while the card is still
    gone. The new process never saw the card, yet it must report it missing (the chips seen in this
    boot are kept in the state folder) instead of resolving the alert. One firing message, no
    resolved one until the card is back, then one."""
    job = TrainJob(tmp_path / "job", ranks=4, tag=tagged(), env={"NPU_WATCHDOG_HEARTBEAT": f"{tmp_path}/hb/"})
    # A short resolve delay, so that a false resolution would come within the test's wait.
    quick = {"alerting": {"resolve_delay": "10s"}}
    with FakeNpuNode(tmp_path / "node") as node, Receiver("feishu") as fs, Receiver("webhook") as hook, job:
        node.place(job, 0)
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url, overrides=quick) as d:
            (name,) = discovered(d, 1)
            chips_seen(d, 8)
            node.lose(2)
            wait_for(lambda: sent(hook, fs).get("webhook:npu_missing"), timeout=60, what="the lost card's page")
        with ShippedDaemon(tmp_path / "d", node.env(), job.only_env, fs.url, hook.url, overrides=quick) as d:
            wait_for(lambda: [f for f in d.findings() if f["rule"] == "npu_missing"], timeout=60,
                     what="the lost card reported by the restarted daemon")
            time.sleep(40)  # held for the npu rule's warm-up after the first rounds, then 10 s absent
            got = sent(hook, fs)
            assert got["webhook"] == {"firing": 1, "resolved": 0} and got["feishu"] == {"firing": 1, "resolved": 0}, got
            lost, back = card_back(node, hook, fs)
            assert (lost["training_job"], lost["npu"], back["npu"]) == (name, "2", "2")
            no_default_job(d, hook)

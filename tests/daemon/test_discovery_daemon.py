"""The real daemon with discovery on, watching real training-job process trees it was never told
about: start, a killed rank, a clean end, two jobs in sequence; metrics unique and removed later."""

from __future__ import annotations

import time

from tests.fakes.receivers import Receiver
from tests.helpers import duplicate_series, wait_for
from tests.jobkit import TrainJob

def assert_unique_series(text: str) -> None:
    """/metrics never carries two series with one label set (Prometheus would drop one)."""
    assert not duplicate_series(text)


def config(job: TrainJob, hook: str, **discovery) -> dict:
    # A short end window: a rank that exits silently is missing once its peers outlive it that long.
    # No npu feed: this machine has no npu-smi, and a job on a node without it pages
    # `npu_smi_missing` (tests/e2e/test_zero_config_jobs.py); these tests are about the ranks.
    discovery = {"enabled": True, "only_env": job.only_env, "forget_after": "4s", "interval": "1s",
                 "end_window": "2s", "feed": ["process", "logs", "heartbeat"], **discovery}
    return {
        "job": {},
        "discovery": discovery,
        "probes": {"process": {"interval": "1s"}, "logs": {"interval": "1s"}, "heartbeat": {"interval": "1s"}},
        "alerting": {"group_window": "300ms", "resolve_delay": "1s", "retry_initial": "300ms", "retry_max": "1s",
                     "channels": [{"type": "webhook", "name": "hook", "url": hook}]},
    }


def fired(rx, status="firing"):
    return [a["labels"] for r in rx.accepted() if r.json["status"] == status for a in r.json["alerts"]]


def ranks_metric(d, job: str) -> float:
    """Discovered ranks, once the process probe follows them too (the logs probe may scan first)."""
    m = d.metrics()
    if m.get(f'npu_watchdog_job_ranks_alive{{training_job="{job}"}}', 0) != m.get(f'npu_watchdog_discovered_ranks{{training_job="{job}"}}'):
        return -1
    return m.get(f'npu_watchdog_discovered_ranks{{training_job="{job}"}}', 0)


def test_job_started_after_the_daemon_a_killed_rank_pages_once(tmp_path, make_daemon):
    job = TrainJob(tmp_path / "a", ranks=4, workers=1, env={"RANK": "0", "NPU_WATCHDOG_JOB": "llama-a"})
    with Receiver("webhook") as rx:
        d = make_daemon(config(job, rx.url))
        assert d.status()["discovery"]["jobs"] == []
        with job:
            wait_for(lambda: ranks_metric(d, "llama-a") == 4, timeout=15, what="4 ranks discovered")
            st = d.status()["discovery"]
            ranks = st["jobs"][0]["ranks"]
            assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
            assert st["jobs"][0]["launcher"]["pid"] == job.proc.pid
            assert st["feeds"]["process"] == "discovery"
            m = d.metrics()
            assert m['npu_watchdog_job_ranks_alive{training_job="llama-a"}'] == 4
            assert m['npu_watchdog_job_ranks_expected{training_job="llama-a"}'] == 4
            assert_unique_series(d.metrics_text())
            job.exit_rank(2)
            wait_for(lambda: fired(rx), timeout=20, what="a page for the dead rank")
            time.sleep(3)  # nothing else may follow while the other ranks live
            pages = fired(rx)
            assert [(p["alertname"], p["training_job"], p.get("rank")) for p in pages] == [("rank_missing", "llama-a", "2")]
            assert_unique_series(d.metrics_text())
        assert "secret" not in d.log().lower() or "redacted" in d.log().lower()


def test_clean_end_does_not_page_and_series_go_then_a_second_job_is_a_second_label(tmp_path, make_daemon):
    first = TrainJob(tmp_path / "a", ranks=2, env={"NPU_WATCHDOG_JOB": "job-one"})
    second = TrainJob(tmp_path / "b", ranks=3, env={"NPU_WATCHDOG_JOB": "job-two"}, tag=first.tag, port="29511")
    with Receiver("webhook") as rx:
        # Long enough a grace that a loaded machine cannot miss the ended job's series (at 0).
        d = make_daemon(config(first, rx.url, forget_after="10s"))
        with first:
            wait_for(lambda: ranks_metric(d, "job-one") == 2, timeout=15, what="job one discovered")
            first.finish()
            assert first.wait() == 0
            ended = 'npu_watchdog_rank_process_up{rank="0",training_job="job-one"}'
            wait_for(lambda: d.metrics().get(ended) == 0, timeout=20, what="rank 0 of job one down")
            assert d.metrics()['npu_watchdog_job_ranks_alive{training_job="job-one"}'] == 0  # kept for the grace
            wait_for(lambda: not any('training_job="job-one"' in k for k in d.metrics()),
                     timeout=40, what="job one's series removed after forget_after")
        assert fired(rx) == []  # a clean end (end-of-training line) is no page
        with second:
            wait_for(lambda: ranks_metric(d, "job-two") == 3, timeout=15, what="job two discovered")
            m = d.metrics()
            assert m['npu_watchdog_job_ranks_alive{training_job="job-two"}'] == 3
            assert not any('training_job="job-one"' in k for k in m)
            assert_unique_series(d.metrics_text())
            second.exit_rank(0)  # rank 0 dies silently; the others are killed a window later
            wait_for(lambda: fired(rx), timeout=20, what="rank_missing page")
            second.stop()  # the ranks left apart, not together: the job is gone
            wait_for(lambda: "job_gone" in {p["alertname"] for p in fired(rx)}, timeout=20, what="job_gone page")
            time.sleep(2)
            assert [(p["alertname"], p["training_job"]) for p in fired(rx)] == [("rank_missing", "job-two"),
                                                                                ("job_gone", "job-two")]


def test_two_jobs_at_once_are_two_labels(tmp_path, make_daemon):
    a = TrainJob(tmp_path / "a", ranks=2, env={"NPU_WATCHDOG_JOB": "alpha"}, port="29521")
    b = TrainJob(tmp_path / "b", ranks=2, env={"NPU_WATCHDOG_JOB": "beta"}, tag=a.tag, port="29522")
    with Receiver("webhook") as rx:
        d = make_daemon(config(a, rx.url))
        with a, b:
            wait_for(lambda: ranks_metric(d, "alpha") == 2 and ranks_metric(d, "beta") == 2, timeout=15,
                     what="both jobs")
            for name in ("alpha", "beta"):
                for r in (0, 1):
                    assert d.metrics()[f'npu_watchdog_rank_process_up{{rank="{r}",training_job="{name}"}}'] == 1
            assert_unique_series(d.metrics_text())
            b.exit_rank(1)
            wait_for(lambda: fired(rx), timeout=20, what="page")
            time.sleep(2)
            assert [(p["alertname"], p["training_job"], p.get("rank")) for p in fired(rx)] == [("rank_missing", "beta", "1")]


def test_heartbeats_named_by_the_ranks_and_a_done_phase_is_a_clean_end(tmp_path, make_daemon):
    hb = tmp_path / "hb"
    job = TrainJob(tmp_path / "a", ranks=2, env={"NPU_WATCHDOG_JOB": "hbjob", "FAKE_TRAIN_QUIET_END": "1",
                                                 "NPU_WATCHDOG_HEARTBEAT": f"{hb}/"})
    with Receiver("webhook") as rx:
        d = make_daemon(config(job, rx.url, forget_after="60s"))
        with job:
            wait_for(lambda: d.metrics().get('npu_watchdog_heartbeat_step{rank="1",training_job="hbjob"}', 0) > 0,
                     timeout=20, what="heartbeat of rank 1 read")
            assert d.status()["discovery"]["jobs"][0]["heartbeats"] == [str(hb / "rank0.json"), str(hb / "rank1.json")]
            info = [k for k in d.metrics() if k.startswith("npu_watchdog_rank_info{")]
            assert len(info) == 2 and all(f'path="{hb}/rank' in k and 'training_job="hbjob"' in k for k in info)
            assert_unique_series(d.metrics_text())
            # The process probe must have followed the ranks before they end: a job that comes and
            # goes between two of its rounds was never seen alive, so it has no series to drop to 0.
            wait_for(lambda: d.metrics().get('npu_watchdog_job_ranks_alive{training_job="hbjob"}') == 2, timeout=20,
                     what="ranks followed by the process probe")
            job.finish()
            assert job.wait() == 0
            wait_for(lambda: d.metrics().get('npu_watchdog_job_ranks_alive{training_job="hbjob"}', 1) == 0, timeout=20,
                     what="ranks gone")
            time.sleep(3)
        assert fired(rx) == []  # the heartbeats said done: no page, though no end line was printed

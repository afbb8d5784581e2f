"""A discovered job's log file that cannot be read is that job's blind spot: `log_unreadable`
names the job (`training_job`), one finding per job, beside the configured sources' own."""

from __future__ import annotations

import os

from tests.probe_kit import following_logs_probe
from tests.synth import T0, Synth
from watchdog.core.findings import JOB_LABEL
from watchdog.detectors import log_health
from watchdog.logrules.tail import SourceSpec
from watchdog.probes.logs import LogProbeObservation


def test_the_probe_names_the_job_of_each_unreadable_discovered_file(tmp_path):
    p, log = following_logs_probe(tmp_path)
    fifo = tmp_path / "rank1.log"
    os.mkfifo(fifo)  # never opened (a reader would block): unreadable, as root too
    p.tailer.set_sources([
        SourceSpec(name="train", paths=(str(log), str(fifo)),
                   path_labels=((str(log), "llama", "0"), (str(fifo), "llama", "1"))),
    ])
    obs = p.collect().value
    assert len(obs.unreadable["train"]) == 1 and str(fifo) in obs.unreadable["train"][0]
    assert [(s, j) for s, j, _m in obs.unreadable_jobs] == [("train", "llama")]


def _findings(unreadable, unreadable_jobs):
    s = Synth(probes=("logs",))
    s.put("logs", LogProbeObservation(events=(), unreadable=unreadable, unreadable_jobs=unreadable_jobs), T0)
    return [f for f in log_health.detect(s.view(T0), s.config) if f.rule == "log_unreadable"]


def test_one_finding_per_job_and_one_for_the_configured_paths():
    got = _findings({"train": ("/a/rank0.log: Permission denied", "/b/rank0.log: Permission denied",
                               "/cfg/x.log: Permission denied")},
                    (("train", "llama", "/a/rank0.log: Permission denied"),
                     ("train", "qwen", "/b/rank0.log: Permission denied")))
    by_job = {f.labels.get(JOB_LABEL): f for f in got}
    assert len(got) == 3 and {"llama", "qwen"} <= set(by_job)
    assert by_job["llama"].evidence == ("/a/rank0.log: Permission denied",)
    assert by_job["qwen"].labels["source"] == "train"
    configured = [f for f in got if f.labels.get(JOB_LABEL) not in ("llama", "qwen")]
    assert [f.evidence for f in configured] == [("/cfg/x.log: Permission denied",)]


def test_without_discovered_files_it_is_one_finding_per_source_as_before():
    got = _findings({"train": ("/cfg/x.log: Permission denied",), "plog": ("/p: Permission denied",)}, ())
    assert sorted(f.labels["source"] for f in got) == ["plog", "train"]

"""The selector-based process probe never takes a launcher, a shell wrapper or a data-loader worker
for a rank, env RANK always wins, and no two series share a label set (real process trees)."""

from __future__ import annotations

import collections

import pytest

from tests.helpers import own_processes_only, wait_for
from tests.jobkit import TrainJob
from watchdog.config import load_config_text
from watchdog.metrics.liveness import _process_samples
from watchdog.probes.process import ProcessProbe


@pytest.fixture(autouse=True)
def _own_processes(monkeypatch):
    """The selectors here (`train\\.py`) match every fake job on the machine: judge only ours."""
    own_processes_only(monkeypatch)


def probe_for(job: TrainJob, **selectors) -> ProcessProbe:
    cfg = load_config_text("probes:\n  process:\n    enabled: true\n" +
                           "".join(f"    {k}: '{v}'\n" for k, v in selectors.items())).probes.process
    return ProcessProbe(cfg, None, None)


def job_pids(job: TrainJob) -> set:
    import psutil

    root = psutil.Process(job.proc.pid)
    return {root.pid} | {c.pid for c in root.children(recursive=True)}


@pytest.mark.parametrize("style", ["torchrun", "bash"])
def test_cmdline_selector_matching_the_launcher_too(tmp_path, style):
    # The example's `cmdline: train\.py` matches the launcher's (and the wrapper's) command line as
    # well as the ranks' and their workers'; the launcher even carries RANK=0 from its scheduler.
    with TrainJob(tmp_path, ranks=4, style=style, workers=1, env={"RANK": "0"}) as job:
        import psutil

        launcher = job.proc.pid if style == "torchrun" else psutil.Process(job.proc.pid).children()[0].pid
        ranks = {c.pid for c in psutil.Process(launcher).children()}
        wait_for(lambda: all(len(psutil.Process(r).children()) == 1 for r in ranks), what="workers up")
        probe = probe_for(job, cmdline="train\\.py")
        obs = probe.collect().value
        got = [(i.rank, i.pid) for i in obs.processes if i.pid in job_pids(job)]
        assert sorted(pid for _, pid in got) == sorted(ranks), "launcher, wrapper or workers taken for ranks"
        assert sorted(r for r, _ in got) == [0, 1, 2, 3]
        for rank, pid in got:
            assert psutil.Process(pid).environ()["RANK"] == str(rank)
        keys = [(s.name, tuple(sorted(s.labels.items()))) for s in _process_samples(obs, "j", {})]
        assert not [k for k, n in collections.Counter(keys).items() if n > 1]

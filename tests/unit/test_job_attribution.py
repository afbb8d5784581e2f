"""Device findings belong to the job whose ranks hold the chip (watchdog.detectors.jobs): npu-smi's
process table pids against the jobs' ranks, else the NPU discovery gave each rank; a chip no job
holds is a node finding with no `training_job` label. Synthetic observations in a real StateStore,
the real detector runner; only the clock is chosen by the test."""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional

from tests.synth import T0, chip
from watchdog.config.schema import Config
from watchdog.detectors import IncrementalDetectors
from watchdog.detectors import npu as npu_det
from watchdog.detectors.jobs import chip_owners
from watchdog.core.findings import JOB_LABEL, Finding
from watchdog.metrics import trends as trend_metrics
from watchdog.observations import JobState, NpuObservation, NpuProcess, ProcessInfo, ProcessObservation
from watchdog.core.state import StateStore

#: Job A: ranks on NPUs 0-3, listed in npu-smi's process table. Job B: ranks on NPUs 4-6 that the
#: table does not list (a container's npu-smi): only their device variables say where they run.
A_PIDS = {0: 2000, 1: 2001, 2: 2002, 3: 2003}
B_PIDS = {4: 3000, 5: 3001, 6: 3002}


def rank(job: str, r: int, pid: int, npu: Optional[int]) -> ProcessInfo:
    return ProcessInfo(pid=pid, rank=r, state="sleeping", create_time=T0 - 3600, cpu_seconds=10.0,
                       cpu_delta=0.5, rss_bytes=1 << 30, threads=10, job=job, npu=npu)


def two_jobs() -> ProcessObservation:
    ranks = [rank("job-a", r, pid, npu) for r, (npu, pid) in enumerate(A_PIDS.items())]
    ranks += [rank("job-b", r, pid, npu) for r, (npu, pid) in enumerate(B_PIDS.items())]
    return ProcessObservation(processes=tuple(ranks), jobs=(JobState("job-a", T0), JobState("job-b", T0)),
                              discovered=True)


def node(util: Dict[int, float], gone: Iterable[int] = (), health: Optional[Dict[int, str]] = None,
         stranger: bool = False) -> NpuObservation:
    gone = set(gone)
    chips = tuple(chip(n, util=util.get(n, 0.0), health=(health or {}).get(n, "OK")) for n in range(8) if n not in gone)
    procs = [NpuProcess(npu=n, chip=0, pid=pid, name="python3", memory_mb=30000) for n, pid in A_PIDS.items()]
    if stranger:  # a process no discovered job owns (someone's notebook) on the free chip
        procs.append(NpuProcess(npu=7, chip=0, pid=9999, name="python3", memory_mb=1000))
    missing = tuple(chip(n) for n in sorted(gone))
    return NpuObservation(version="24.1", chips=chips, processes=tuple(p for p in procs if p.npu not in gone),
                          missing=missing)


class Node:
    def __init__(self, **trends):
        self.config = Config.model_validate({"node": {"name": "node-a"}, "discovery": {"enabled": True},
                                             "trends": {"idle_for": "10m", **trends}})
        assert self.config.fed_by_discovery("process")
        self.store = StateStore(history_seconds=7200, max_samples=100000)
        self.store.started_at = T0
        for p in ("npu", "process", "heartbeat", "logs"):
            self.store.register(p, 10.0)
            self.store.update_status(p, up=True, runs_total=1)
        self.runner = IncrementalDetectors([("npu", npu_det.detect)])

    def feed(self, start: float, end: float, npu) -> None:
        t = start
        while t <= end:
            self.store.put("process", two_jobs(), at=t)
            self.store.put("npu", npu, at=t)
            t += 10.0

    def findings(self, now: float, rule: str) -> List[Finding]:
        got, errors = self.runner.run(self.store.view(now=now), self.config)
        assert errors == []
        return sorted((f for f in got if f.rule == rule), key=lambda f: int(f.labels.get("npu", -1)))


def test_chip_owners_prefers_the_process_table_then_the_ranks_npu():
    obs = node({}, gone=[5])
    owners = chip_owners(obs, two_jobs())
    assert {k[0]: v for k, v in owners.items()} == {0: "job-a", 1: "job-a", 2: "job-a", 3: "job-a",
                                                   4: "job-b", 5: "job-b", 6: "job-b"}
    # npu-smi says B's rank 0 runs on NPU 3 (its environment said 4): the table wins.
    moved = NpuObservation(version=None, chips=obs.chips,
                           processes=obs.processes + (NpuProcess(npu=7, chip=0, pid=3000, name="p", memory_mb=1),))
    assert chip_owners(moved, two_jobs())[(7, 0)] == "job-b"
    assert chip_owners(obs, None) == {}


def test_idle_chips_page_for_the_job_holding_them_and_a_free_chip_is_the_nodes():
    n = Node()
    busy_b = {4: 90.0, 5: 92.0, 6: 91.0}
    n.feed(T0, T0 + 700, node(busy_b, health={7: "Alarm"}))
    idle = n.findings(T0 + 700, "npu_idle")
    assert [(f.labels["npu"], f.labels[JOB_LABEL]) for f in idle] == [(str(k), "job-a") for k in range(4)]
    [sick] = n.findings(T0 + 700, "npu_unhealthy")
    assert sick.labels == {"host": "node-a", "npu": "7", "chip": "0"}  # no job holds it: no job label
    # No finding of any rule names a job that does not exist.
    got, _ = n.runner.run(n.store.view(now=T0 + 700), n.config)
    assert {f.labels.get(JOB_LABEL) for f in got} <= {"job-a", None}


def test_a_lost_card_pages_for_its_job_even_without_a_process_table_entry():
    n = Node()
    n.feed(T0, T0 + 100, node({k: 80.0 for k in range(8)}))
    assert n.findings(T0 + 100, "npu_missing") == []
    n.feed(T0 + 110, T0 + 130, node({k: 80.0 for k in range(8)}, gone=[5]))
    [lost] = n.findings(T0 + 130, "npu_missing")
    assert lost.labels == {"host": "node-a", JOB_LABEL: "job-b", "npu": "5", "chip": "0"}


def test_a_stranger_on_a_free_chip_is_a_node_finding_and_the_node_count_is_the_nodes():
    n = Node(expected_chips=9)
    n.feed(T0, T0 + 700, node({4: 90.0, 5: 90.0, 6: 90.0}, stranger=True))
    idle = n.findings(T0 + 700, "npu_idle")
    assert [(f.labels["npu"], f.labels.get(JOB_LABEL)) for f in idle] == \
        [("0", "job-a"), ("1", "job-a"), ("2", "job-a"), ("3", "job-a"), ("7", None)]
    short = [f for f in n.findings(T0 + 700, "npu_missing")]
    assert len(short) == 1 and short[0].labels == {"host": "node-a"} and short[0].details["chips_visible"] == 8


def test_stall_metrics_are_per_discovered_job_and_never_a_default_name():
    n = Node()
    n.feed(T0, T0 + 30, node({}))
    view = n.store.view(now=T0 + 30)
    samples = trend_metrics.evaluate(view, n.config)
    jobs = sorted(s.labels[JOB_LABEL] for s in samples if s.name == "npu_watchdog_job_stalled")
    assert jobs == ["job-a", "job-b"]


def test_chips_changing_hands_when_a_job_restarts_are_not_lost_cards():
    n = Node()
    n.feed(T0, T0 + 100, node({k: 80.0 for k in range(8)}))
    only_a = ProcessObservation(processes=tuple(p for p in two_jobs().processes if p.job == "job-a"),
                                jobs=(JobState("job-a", T0), JobState("job-b", T0)), discovered=True)
    # B restarts: for a round no rank holds its chips (they are the node's), then they are B's again.
    n.store.put("process", only_a, at=T0 + 110)
    n.store.put("npu", node({k: 80.0 for k in range(8)}), at=T0 + 110)
    assert n.findings(T0 + 110, "npu_missing") == []
    n.feed(T0 + 120, T0 + 140, node({k: 80.0 for k in range(8)}))
    assert n.findings(T0 + 140, "npu_missing") == []


def test_a_lost_card_stays_one_finding_while_its_job_restarts():
    """The card is what fails: while job B restarts (a round with none of its ranks, the chip
    is the node's) the finding keeps its key, so the engine keeps one alert and one page; the
    job that holds the chip rides along as context."""
    n = Node()
    n.feed(T0, T0 + 100, node({k: 80.0 for k in range(8)}))
    n.feed(T0 + 110, T0 + 130, node({k: 80.0 for k in range(8)}, gone=[5]))
    [held] = n.findings(T0 + 130, "npu_missing")
    only_a = ProcessObservation(processes=tuple(p for p in two_jobs().processes if p.job == "job-a"),
                                jobs=(JobState("job-a", T0),), discovered=True)
    n.store.put("process", only_a, at=T0 + 140)
    n.store.put("npu", node({k: 80.0 for k in range(8)}, gone=[5]), at=T0 + 140)
    [free] = n.findings(T0 + 140, "npu_missing")
    n.feed(T0 + 150, T0 + 160, node({k: 80.0 for k in range(8)}, gone=[5]))
    [again] = n.findings(T0 + 160, "npu_missing")
    assert held.labels[JOB_LABEL] == again.labels[JOB_LABEL] == "job-b" and JOB_LABEL not in free.labels
    assert held.key == free.key == again.key
    assert held.identity == {"host": "node-a", "npu": "5", "chip": "0"} and held.context == (JOB_LABEL,)
    # Without the context, the holder would be part of the key (a second alert, a second page).
    assert held.key != Finding("npu_missing", "critical", "", dict(held.labels)).key

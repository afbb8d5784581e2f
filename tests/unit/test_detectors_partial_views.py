"""Every detector tolerates a view with no observation yet, or only some: a probe enabled and up
whose first round has not arrived (a job just re-discovered, a reload), an npu-smi round with no
chips, a discovered job whose ranks npu-smi does not list. A detector that raises is counted as
a detector error and blinds its rules for that pass ("detector stall failed"), so none may.

A property test over the registry of detectors (`load_detectors`: a new detector is covered
without editing this file), with the view's probes, their rounds and their contents chosen by
hypothesis.
"""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.synth import T0, Synth, beats, chip, logs, npu_obs  # noqa: E402
from watchdog.detectors import load_detectors  # noqa: E402
from watchdog.observations import JobState, ProcessInfo, ProcessObservation  # noqa: E402
from watchdog.summaries import Summaries  # noqa: E402

PROBES = ("npu", "process", "heartbeat", "logs")
DETECTORS = load_detectors()


def _procs(n: int, job: str | None, t: float) -> ProcessObservation:
    ranks = tuple(ProcessInfo(pid=1000 + r, rank=r, state="sleeping", create_time=T0 - 60, cpu_seconds=1.0,
                              cpu_delta=0.0, rss_bytes=1 << 20, threads=4, job=job, npu=r) for r in range(n))
    jobs = (JobState(name=job, first_seen_at=t, expected=n or None),) if job else ()
    return ProcessObservation(processes=ranks, expected=n or None, jobs=jobs, discovered=bool(job),
                              first_seen_at=t if n else None)


def _value(probe: str, kind: int, t: float, job: str | None):
    """One round of `probe`: kind 0 is empty (no chips, ranks, readings or lines), 1 some content."""
    if probe == "npu":
        return npu_obs([] if kind == 0 else [chip(0), chip(1, util=None, hbm=None, temp=None)],
                       held=[] if kind == 0 else [0])
    if probe == "process":
        return _procs(0 if kind == 0 else 2, job, t)
    if probe == "heartbeat":
        return beats([] if kind == 0 else [10, None], t)
    return logs({} if kind == 0 else {"train": t})


#: Per probe: None (enabled, up, never observed) or a list of round kinds at 10 s steps.
rounds = st.one_of(st.none(), st.lists(st.integers(0, 1), min_size=1, max_size=3))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(enabled=st.sets(st.sampled_from(PROBES)), plan=st.fixed_dictionaries({p: rounds for p in PROBES}),
       job=st.sampled_from([None, "job-x"]), down=st.sets(st.sampled_from(PROBES)),
       later=st.sampled_from([0.0, 5.0, 4000.0]), attached=st.sampled_from(["folded", "daemon", "reloaded"]))
def test_no_detector_raises_on_an_empty_or_partial_view(enabled, plan, job, down, later, attached):
    """`attached`: the summaries folded from the view (a command), kept by the daemon's runner
    across passes, or kept across a reload (a new config object, no new sample since)."""
    s = Synth(probes=tuple(sorted(enabled)))
    last = T0
    for probe in sorted(enabled):
        for i, kind in enumerate(plan[probe] or ()):
            t = T0 + 10 * i
            s.put(probe, _value(probe, kind, t, job), t)
            last = max(last, t)
        if probe in down:
            s.down(probe)
    view, config = s.view(last + later), s.config
    if attached != "folded":
        runner = Summaries()
        view = runner.attach(view, config)
        if attached == "reloaded":
            config = config.model_copy()
            view = runner.attach(s.view(last + later), config)
    for name, detect in DETECTORS:
        try:
            detect(view, config)
        except Exception as exc:  # the assertion names the detector and the view
            raise AssertionError(f"detector {name} raised {type(exc).__name__}: {exc} "
                                 f"(probes {sorted(enabled)}, rounds {plan}, job {job}, down {sorted(down)}, {attached})") from exc


def test_every_detector_after_a_reload_before_the_next_npu_round():
    """The case seen in the daemon ("detector stall failed"): the summaries kept across a config
    change, no npu-smi round folded since; the stall and NPU rules still judge the last round."""
    s = Synth(probes=("npu", "process", "heartbeat"))
    s.put("npu", npu_obs([chip(0, util=0.0), chip(1, util=0.0)]), T0)
    s.put("process", _procs(2, None, T0), T0)
    s.put("heartbeat", beats([10, 10], T0), T0)
    runner = Summaries()
    runner.attach(s.view(T0 + 5), s.config)
    config = s.config.model_copy()
    view = runner.attach(s.view(T0 + 5), config)
    for name, detect in DETECTORS:
        detect(view, config)
    assert view.summaries["npu"].latest is not None

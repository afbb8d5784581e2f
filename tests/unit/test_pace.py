"""The job pace: progress lines -> step times -> a sustained slowdown with its suspect, and the
goodput booked per state (synthetic state on a chosen clock; the real parser and summaries)."""

from __future__ import annotations

import time
from typing import List, Optional, Sequence

import pytest

from tests.synth import T0, Synth, beats, chip, npu_obs, procs, rules
from watchdog.detectors import pace as pace_det
from watchdog.logrules.progress import PACE_LINES, ProgressMatcher
from watchdog.observations import LogObservation, PaceLine
from watchdog.parse.pace import PaceMark, parse_phase, parse_progress
from watchdog.summaries.pace import PaceTrack, declared_phase, fold_round, heartbeat_lines, sample_at
from watchdog.config.sections.pace import PaceConfig

# Real-format lines (tests/samples/SOURCES.md: the trainers' print formats).
MEGATRON = (" [2024-05-28 10:21:42] iteration      120/  500000 | consumed samples:        61440 | "
            "elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 180.2 | "
            "learning rate: 1.500000E-04 | global batch size:   512 | lm loss: 7.289795E+00 | "
            "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |")
MINDFORMERS = ("{ Epoch:[  2/  3], step:[   10/  125], loss: 2.345, per_step_time: 1534ms, lr: 1e-05, "
               "overflow cond: False, loss_scale: 1.0")
MINDSPORE = "epoch: 1 step: 120, loss is 1.2345"
DEEPSPEED = "[Rank 0] step=120, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]"
HF = "{'loss': 1.2345, 'grad_norm': 0.98, 'learning_rate': 4.5e-05, 'epoch': 0.52}"


def test_parse_each_trainer():
    assert parse_progress(MEGATRON) == PaceMark(120.0, 1.2345, "megatron",
                                                stamp=time.mktime((2024, 5, 28, 10, 21, 42, 0, 0, -1)))
    assert parse_progress(MEGATRON.replace(" [2024-05-28 10:21:42]", "")).stamp is None
    assert parse_progress(MINDFORMERS) == PaceMark(135.0, 1.534, "mindformers")
    assert parse_progress(MINDSPORE) == PaceMark(1 * 10_000_000 + 120.0, None, "mindspore")
    assert parse_progress(DEEPSPEED) == PaceMark(120.0, None, "deepspeed")
    assert parse_progress(HF) == PaceMark(0.52, None, "hf")
    assert parse_phase("saving checkpoint at iteration     100 to /ckpt in torch format") == "checkpoint"
    assert parse_phase(" validation loss at iteration 100 | lm loss value: 2.1 |") == "eval"
    assert parse_phase("***** Running Evaluation *****") == "eval"
    assert parse_progress("just a line") is None
    assert parse_phase("loss 2.0") is None


def test_matcher_marks_in_order_and_skips_failures():
    block = "\n".join([MEGATRON.replace("120/", "121/"), "saving checkpoint at iteration 121 to /c",
                       MEGATRON.replace("120/", "122/")]).encode() + b"\n"
    found, marks = ProgressMatcher().marks(block, lambda text: False)
    assert found
    assert [m.counter for m in marks] == [121.0, None, 122.0]
    assert marks[1].phase == "checkpoint"
    found, marks = ProgressMatcher().marks(MEGATRON.encode() + b"\n", lambda text: True)
    assert not found and marks == []


def test_an_evaluations_line_older_than_the_kept_steps_is_still_marked():
    """A round read late: the evaluation's closing line, then more steps than the walk keeps
    (PACE_LINES). The phase line still comes first, so the gap it closes is booked eval."""
    steps = [MEGATRON.replace("120/", f"{121 + i}/") for i in range(PACE_LINES + 8)]
    block = "\n".join([MEGATRON, " validation loss at iteration 120 | lm loss value: 2.1 |"] + steps).encode() + b"\n"
    found, marks = ProgressMatcher().marks(block, lambda text: False)
    assert found and marks[0].phase == "eval" and len(marks) == PACE_LINES + 1
    assert [m.counter for m in marks[1:]] == [float(121 + 8 + i) for i in range(PACE_LINES)]
    # Only the newest such line, whatever a hostile block repeats.
    block = b"saving checkpoint at iteration 1\n" * 5000 + "\n".join(steps).encode() + b"\n"
    _, marks = ProgressMatcher().marks(block, lambda text: False)
    assert [m.phase for m in marks].count("checkpoint") == 1


def test_parse_is_bounded_on_hostile_text():
    line = "iteration " + "1" * 100000 + "/ 2 |" + " " * 100000
    parse_progress(line)  # bounded: cut to MAX_LINE, digits bounded
    assert parse_progress("elapsed time per iteration (ms): 1e999999") is None


def lines(counter: float, step: Optional[float] = None, phase: Optional[str] = None) -> List[PaceLine]:
    return [PaceLine(0.0, "train", PaceMark(counter=None if phase else counter, step_seconds=step, phase=phase))]


def rank(name: str, counter: float, phase: Optional[str] = None) -> PaceLine:
    """A progress (or phase) line of one rank's own log file."""
    return PaceLine(0.0, "train", PaceMark(counter=None if phase else counter, step_seconds=1.0, phase=phase),
                    stream=f"/logs/{name}.log")


def run(track: PaceTrack, t0: float, t1: float, step: float, counter: float, every: float = 1.0,
        printed: bool = True) -> float:
    t = t0
    while t <= t1 + 1e-9:
        counter += every / step
        track.add(t, lines(counter, step if printed else None))
        t += every
    return counter


CFG = PaceConfig(window="40s", slow_for="20s", warmup="60s", baseline="10m", pause_min="5s")


@pytest.mark.parametrize("printed", [True, False])
def test_sustained_slowdown_named_and_resolved(printed):
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    c = run(tr, T0 + 1, T0 + 300, 1.0, 0, printed=printed)
    assert tr.verdict.baseline == pytest.approx(1.0, rel=0.01)
    assert tr.verdict.slow_since is None
    c = run(tr, T0 + 301, T0 + 400, 1.2, c, printed=printed)
    assert tr.verdict.slow_since is not None and tr.verdict.slow_since - T0 < 340
    assert tr.verdict.ratio == pytest.approx(1.2, rel=0.02)
    run(tr, T0 + 401, T0 + 500, 1.0, c, printed=printed)
    assert tr.verdict.slow_since is None


def test_warmup_and_short_spikes_are_not_slow():
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    c = run(tr, T0 + 1, T0 + 50, 3.0, 0)          # the first minute: compilation
    c = run(tr, T0 + 51, T0 + 300, 1.0, c)
    c = run(tr, T0 + 301, T0 + 310, 1.5, c)       # ten seconds of slower steps: a median lets it pass
    run(tr, T0 + 311, T0 + 400, 1.0, c)
    assert tr.verdict.baseline == pytest.approx(1.0, rel=0.01)
    assert tr.slow_since is None


def test_an_evaluation_named_at_its_end_is_booked_eval():
    """Megatron prints `validation loss at iteration N` when the evaluation is over."""
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    c = run(tr, T0 + 1, T0 + 300, 1.0, 0, printed=False)
    for t in range(301, 360, 5):
        tr.add(T0 + t, [])
    tr.add(T0 + 360, lines(0, phase="eval") + lines(c + 1))
    secs, _ = tr.goodput()
    assert secs["eval"] == pytest.approx(60, abs=1) and secs["stalled"] == 0


def test_a_heartbeat_declared_checkpoint_names_the_gap():
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    c = run(tr, T0 + 1, T0 + 300, 1.0, 0, printed=False)
    for t in range(301, 400, 5):
        tr.add(T0 + t, [], declared="checkpoint")
    run(tr, T0 + 400, T0 + 410, 1.0, c, printed=False)
    secs, _ = tr.goodput()
    assert secs["checkpoint"] == pytest.approx(100, abs=1) and secs["stalled"] == 0


def test_a_track_folded_afresh_reads_each_rounds_own_heartbeat():
    """A job's summaries rebuilt from the history (the job left the process table for a pass)
    replay old rounds: an evaluation the heartbeat declared then is booked eval, though the
    heartbeat says train now (the trainer printed no phase line); a round reads no heartbeat
    taken after it."""
    from tests.synth import beats

    s = Synth(probes=("process", "heartbeat"))
    phase = lambda t: "eval" if T0 + 100 <= t < T0 + 160 else "train"  # noqa: E731
    s.feed(T0, T0 + 200, every=5.0, process=lambda t: procs(8, 1.0),
           heartbeat=lambda t: beats([int(t - T0)] * 8, t, phases=[phase(t)] * 8))
    view = s.view(T0 + 200)
    assert declared_phase(view) is None and declared_phase(view, T0 + 130) == "eval"
    assert declared_phase(view, T0 + 99) is None and sample_at(view, "heartbeat", T0 - 1) is None
    assert sample_at(view, "heartbeat", T0 + 132.5).time == T0 + 130
    tr, c = PaceTrack(CFG), 0.0
    for t in range(0, 201):  # the replay: every round folded with today's view
        c += 1 if phase(T0 + t) == "train" else 0
        fold_round(tr, T0 + t, lines(c) if phase(T0 + t) == "train" else [], view)
    secs, _ = tr.goodput()
    assert secs["eval"] == pytest.approx(60, abs=1) and secs["stalled"] == 0, secs


def test_a_clean_end_drops_the_quiet_tail_a_failed_one_books_it():
    for clean, stalled in ((True, 0), (False, 60)):
        tr = PaceTrack(CFG)
        tr.grace = 11.0
        tr.add(T0, [])
        run(tr, T0 + 1, T0 + 300, 1.0, 0)
        end = T0 + 300 + (8 if clean else 60)
        tr.finish(end, clean)
        secs, share = tr.goodput()
        assert secs["stalled"] == pytest.approx(stalled, abs=1)
        tr.add(end + 100, [])                      # nothing is booked after the end
        assert tr.goodput()[0] == secs


def test_checkpoint_gap_is_booked_not_slow():
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    c = run(tr, T0 + 1, T0 + 300, 1.0, 0, printed=False)
    tr.add(T0 + 300.5, lines(0, phase="checkpoint"))
    for t in range(301, 420, 5):                   # two minutes without a step
        tr.add(T0 + t, [])
    c = run(tr, T0 + 421, T0 + 500, 1.0, c, printed=False)
    assert tr.verdict.slow_since is None
    secs, share = tr.goodput()
    assert secs["checkpoint"] == pytest.approx(121, abs=2)
    assert secs["stalled"] == 0


def test_goodput_of_a_hang_five_of_thirty():
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    c = run(tr, T0 + 1, T0 + 1500, 1.0, 0, every=2.0)
    for t in range(1501, 1800, 5):                 # five minutes hung
        tr.add(T0 + t, [])
    assert tr.seconds["stalled"] == 0              # booked when its cause is known ...
    assert tr.goodput()[1] == pytest.approx(1498 / 1796, abs=0.002)   # ... but the share falls already
    run(tr, T0 + 1801, T0 + 1801, 1.0, c)
    secs, share = tr.goodput()
    assert share == pytest.approx(25 / 30, abs=0.01)
    assert secs["stalled"] == pytest.approx(300, abs=3)
    assert sum(secs.values()) == pytest.approx(1801, abs=1)


def test_restart_and_recompute():
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    run(tr, T0 + 1, T0 + 100, 1.0, 0)              # counter reaches 100
    for t in range(101, 160, 5):
        tr.add(T0 + t, [])
    run(tr, T0 + 160, T0 + 200, 1.0, 50)           # back from the checkpoint at step 50
    secs, _ = tr.goodput()
    assert secs["recompute"] == pytest.approx(40, abs=2)
    assert secs["stalled"] + secs["restarting"] == pytest.approx(60, abs=2)


def test_a_rank_lagging_the_others_after_a_pause_is_no_restart():
    """Every rank prints its own progress lines into its own file. When a checkpoint ends, the rank
    that lagged prints its last steps first (files are read one by one: that round sees only it),
    below the counter the leader reached: no rank went back, so the pause is the checkpoint's, and
    nothing is booked as restarting. A rank whose own file does go back is a restart still."""
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    for i in range(1, 100):                                # rank a leads rank b by two steps
        tr.add(T0 + i, [rank("a", i + 2), rank("b", i)])
    tr.add(T0 + 100, [rank("a", 0, phase="checkpoint")])   # a 60 s checkpoint
    for t in range(101, 160, 5):
        tr.add(T0 + t, [])
    tr.add(T0 + 160, [rank("b", 100)])                     # b's lagging step, alone in its round
    tr.add(T0 + 161, [rank("a", 102), rank("b", 101)])
    for i in range(2, 20):
        tr.add(T0 + 160 + i, [rank("a", 101 + i), rank("b", 99 + i)])
    secs, _ = tr.goodput()
    assert secs["restarting"] == 0 and secs["recompute"] == 0, secs
    assert secs["checkpoint"] == pytest.approx(60, abs=2), secs

    for i in range(0, 30):                                 # then rank a's file starts again lower
        tr.add(T0 + 300 + i, [rank("a", 50 + i), rank("b", 50 + i)])
    secs, _ = tr.goodput()
    assert secs["restarting"] > 0 and secs["recompute"] > 0, secs


def test_a_restart_read_within_a_pause_is_booked_restarting():
    """A quick restart: the first round after it comes within a pause (5 s here) of the last progress.
    Every round until the pause is over sees the counter below the stream's position (a position
    is lowered only by a booked restart), so the restart is booked, not one long stall."""
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    run(tr, T0 + 1, T0 + 100, 1.0, 0)               # counter 100, pause = 5 s
    for i in range(0, 60):                          # restarted from step 50, first line 3 s later
        tr.add(T0 + 103 + i, lines(50 + i, 1.0))
    secs, _ = tr.goodput()
    assert secs["restarting"] > 0 and secs["recompute"] == pytest.approx(50, abs=3), str(secs)


def test_a_restart_inside_one_round_then_read_on():
    """The round after a pause reads a rank's last pre-crash step and its first restarted ones
    (a:101, a:50, a:51): it moved, so no restart then; the rounds after it still see a's steps
    below the position a reached, so the restart is booked once past a pause."""
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    for i in range(1, 101):
        tr.add(T0 + i, [rank("a", i)])
    for t in range(101, 160, 5):
        tr.add(T0 + t, [])
    tr.add(T0 + 160, [rank("a", 101), rank("a", 50), rank("a", 51)])
    for i in range(1, 60):
        tr.add(T0 + 160 + i, [rank("a", 51 + i)])
    secs, _ = tr.goodput()
    assert secs["restarting"] > 0 and secs["recompute"] > 0, str(secs)


def test_heartbeat_counter_quick_restart():
    """The heartbeat's pace (no file: its stream is its source) books a quick restart too."""
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    for i in range(1, 101):
        tr.add(T0 + i, heartbeat_lines(T0 + i, beats([i] * 8, T0 + i)))
    for i in range(0, 60):
        tr.add(T0 + 103 + i, heartbeat_lines(T0 + 103 + i, beats([50 + i] * 8, T0 + 103 + i)))
    secs, _ = tr.goodput()
    assert secs["restarting"] > 0 and secs["recompute"] > 0, str(secs)


def test_a_restart_going_back_less_than_the_ranks_spread():
    """Rank a leads b by two steps; the job crashes at a=101/b=99 and resumes from the checkpoint
    of step 98 (both print 99 first) after 60 s: 99 is below a's own position but not below the
    floor (b's 99): a stream with a position of its own is judged by it, not by the floor."""
    tr = PaceTrack(CFG)
    tr.add(T0, [])
    for i in range(1, 100):
        tr.add(T0 + i, [rank("a", i + 2), rank("b", i)])
    for t in range(100, 160, 5):
        tr.add(T0 + t, [])
    for i in range(0, 20):
        tr.add(T0 + 160 + i, [rank("a", 99 + i), rank("b", 99 + i)])
    secs, _ = tr.goodput()
    assert secs["restarting"] > 0 and secs["recompute"] > 0, str(secs)


def _synth():
    return Synth(probes=("npu", "process", "logs"), log_sources=("train",),
                 pace={"window": "40s", "slow_for": "20s", "warmup": "60s", "baseline": "10m"})


def _logs(at: float, counter: float, step: float) -> LogObservation:
    return LogObservation(events=(), last_line_at={"train": at}, lines_read={"train": 1}, progress_at={"train": at},
                          pace=(PaceLine(at, "train", PaceMark(counter, step, "megatron")),))


def _play(s: Synth, utils: Sequence[float], slow: float, until: float) -> None:
    counter = [0.0]

    def logs(t: float) -> LogObservation:
        step = 1.0 if t < T0 + 300 else slow
        counter[0] += 5.0 / step
        return _logs(t, counter[0], step)

    s.feed(T0, until, every=5.0, logs=logs, process=lambda t: procs(8, 1.0),
           npu=lambda t: npu_obs([chip(n, util=(75.0 if t < T0 + 300 else utils[n])) for n in range(8)]))


def test_one_chip_busier_is_named():
    s = _synth()
    _play(s, [70, 70, 70, 93, 70, 70, 70, 70], 1.2, T0 + 400)
    found = rules(pace_det.detect(s.view(T0 + 400), s.config), "job_slowdown")
    assert len(found) == 1
    f = found[0]
    assert [(x["npu"], x["rank"]) for x in f.details["suspects"]] == [(3, 3)]
    assert "npu 3 chip 0 (rank 3)" in f.summary and "npu 3" in str(f.value)
    assert 15 <= f.details["slower_pct"] <= 25


def test_uniform_slowdown_names_none():
    s = _synth()
    _play(s, [62] * 8, 1.2, T0 + 400)
    found = rules(pace_det.detect(s.view(T0 + 400), s.config), "job_slowdown")
    assert len(found) == 1 and found[0].details["suspects"] == []
    assert "no chip of this node stands out" in found[0].summary


def test_normal_pace_says_nothing():
    s = _synth()
    _play(s, [75] * 8, 1.0, T0 + 400)
    assert rules(pace_det.detect(s.view(T0 + 400), s.config), "job_slowdown") == []


@pytest.mark.parametrize("step", [0.5, 2.0, 8.0])
def test_default_config_names_a_20pct_slowdown_within_60s(step):
    """The shipped thresholds on a synthetic clock: a job 20 % slower from t=600 s is judged slow
    for `slow_for` (the detector's condition) no later than 60 s after, at 0.5-8 s per step
    (one log round every 3 s, as the shipped logs probe reads)."""
    cfg = PaceConfig()
    tr = PaceTrack(cfg)
    tr.add(T0, [])
    counter, t, fired = 0.0, 0.0, None
    next_step = 0.0
    while t <= 900 and fired is None:
        t += 3.0
        marks = []
        while next_step + (step if next_step < 600 else step * 1.2) <= t:
            s = step if next_step < 600 else step * 1.2
            next_step += s
            counter += 1
            marks.append(PaceLine(T0 + t, "train", PaceMark(counter, s, "megatron")))
        tr.add(T0 + t, marks)
        v = tr.verdict
        if v.slow_since is not None and T0 + t - v.slow_since >= cfg.slow_for:
            fired = t
    assert fired is not None and fired - 600 <= 60, (step, fired)


def test_a_job_printing_no_progress_line_is_paced_by_its_heartbeats():
    """The hooks' heartbeats carry the step: their rate is the pace when no log line gives one."""
    from tests.synth import beats

    s = Synth(probes=("npu", "process", "heartbeat"),
              pace={"window": "40s", "slow_for": "20s", "warmup": "60s", "baseline": "10m"})
    step = [0.0]

    def hb(t: float):
        step[0] += 5.0 / (1.0 if t < T0 + 300 else 1.25)
        return beats([int(step[0])] * 8, t)

    s.feed(T0, T0 + 420, every=5.0, heartbeat=hb, process=lambda t: procs(8, 1.0),
           npu=lambda t: npu_obs([chip(n, util=75.0 if t < T0 + 300 or n != 5 else 94.0) for n in range(8)]))
    (f,) = rules(pace_det.detect(s.view(T0 + 420), s.config), "job_slowdown")
    assert [x["npu"] for x in f.details["suspects"]] == [5]
    assert 15 <= f.details["slower_pct"] <= 35


def test_mindspore_epochs_and_hf_log_lines_keep_their_pace():
    """MindSpore counts steps within an epoch; HF logs its fractional epoch every logging_steps:
    neither may look like a restart, a stall or a change of pace."""
    for text, nxt in (("mindspore", lambda i: f"epoch: {1 + i // 50} step: {1 + i % 50}, loss is 1.2"),
                      ("hf", lambda i: "{'loss': 1.2, 'learning_rate': 4e-05, 'epoch': %.2f}" % (0.001 * (i + 1)))):
        tr = PaceTrack(CFG)
        tr.add(T0, [])
        for i in range(300):
            tr.add(T0 + 1 + i * 2.0, [PaceLine(0.0, "train", parse_progress(nxt(i)))])
        secs, share = tr.goodput()
        assert secs["stalled"] == 0 and secs["restarting"] == 0 and share > 0.99, (secs, text)
        assert tr.verdict.baseline is not None and tr.verdict.slow_since is None
        assert tr.verdict.recent == pytest.approx(2.0, rel=0.01)


def test_status_line_and_rows_from_the_evaluated_samples():
    from watchdog.commands.status import _pace_line
    from watchdog.metrics import pace as pace_metrics
    from watchdog.metrics.catalog import MetricSample

    job = {"training_job": "llm"}
    samples = [MetricSample("npu_watchdog_job_step_seconds", job, 1.02),
               MetricSample("npu_watchdog_job_step_baseline_seconds", job, 1.0),
               MetricSample("npu_watchdog_job_goodput_ratio", job, 0.833),
               MetricSample("npu_watchdog_job_time_seconds_total", {**job, "state": "train"}, 1500.0),
               MetricSample("npu_watchdog_job_time_seconds_total", {**job, "state": "stalled"}, 300.0)]
    (row,) = pace_metrics.status_rows({pace_metrics.__name__: samples})
    assert row == {"training_job": "llm", "step_seconds": 1.02, "baseline_step_seconds": 1.0,
                   "goodput_ratio": 0.833, "seconds": {"train": 1500.0, "stalled": 300.0}}
    assert _pace_line(row) == "job llm: 1.02 s/step (baseline 1 s), goodput 83.3 %, stalled 300s"


def test_a_late_round_does_not_lengthen_the_gap_its_stamped_lines_close():
    """Megatron's lines carry their own time: a 10 s hang read 20 s late (a loaded node) is booked
    as 10 s; a stamp hours off (the trainer in another time zone) is not trusted."""
    def stamped(counter: float, t: float) -> List[PaceLine]:
        text = time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime(t)) + \
            f" iteration {int(counter):8d}/  100000 | elapsed time per iteration (ms): 1000.0 |"
        return [PaceLine(0.0, "train", parse_progress(text))]

    for offset, stalled in ((0.0, 10.0), (8 * 3600.0, 30.0)):
        tr = PaceTrack(CFG)
        tr.add(T0, [])
        for i in range(1, 101):
            tr.add(T0 + i, stamped(i, T0 + i - offset))
        tr.add(T0 + 130, stamped(101, T0 + 110 - offset))   # printed at 110, read at 130
        secs, _ = tr.goodput()
        assert secs["stalled"] == pytest.approx(stalled, abs=1.0), (offset, secs)

"""The clean-end decision (`judge_end`), row by row as docs/discovery.md lists them, and the
evidence the discovered process probe gathers from real log bytes (end and failure lines)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from watchdog.config import load_config_text
from watchdog.detectors.liveness import FAILURE, FINISHED, LEAVING, judge_end
from watchdog.observations import EndEvidence
from watchdog.probes.discovered import end_line, failure_line, failure_matcher

W = 30.0  # discovery.end_window
T = 1000.0  # when the first rank left
#: Every rank left together and the kernel's process events said each exited 0.
QUIET = EndEvidence(ranks=4, gone=4, first_left_at=T, last_left_at=T + 5, exit_source="process events",
                    exits=((7, "exit status 0"), (8, "exit status 0"), (9, "exit status 0"), (10, "exit status 0")))
#: The same departure where no exit status can be read (no process events: not root).
BLIND = replace(QUIET, exit_source="", exits=())


def judged(ev: EndEvidence, running: int = 0, now: float = T + 10):
    v = judge_end(ev, running, now, W)
    return v.outcome, v.row


@pytest.mark.parametrize("ev, running, now, want", [
    # 1. a kernel kill of one of the job's pids wins over everything, even an end line
    (EndEvidence(ranks=4, gone=4, done=4, heartbeats=4, end_line="Training completed.", kernel_kill="oom-kill pid 7"),
     0, T + 10, (FAILURE, "kernel_kill")),
    # 2. a failure line in the ranks' last lines wins over an end line and done heartbeats
    (EndEvidence(ranks=4, gone=4, done=4, heartbeats=4, end_line="Training completed.",
                 failure_line="oom_npu: RuntimeError: NPU out of memory"), 0, T + 10, (FAILURE, "failure_line")),
    # ... and pages at once while the peers still run (rank_missing, no waiting for the window)
    (EndEvidence(ranks=4, gone=1, failure_line="traceback: Traceback (most recent call last):",
                 first_left_at=T, last_left_at=T), 3, T + 1, (FAILURE, "failure_line")),
    # 3. one rank gone longer than the window while its peers run: missing
    (EndEvidence(ranks=4, gone=1, first_left_at=T, last_left_at=T), 3, T + W + 1, (FAILURE, "left_alone")),
    # 4. ranks going, peers not yet, within the window, no failure sign: no page yet
    (EndEvidence(ranks=4, gone=1, first_left_at=T, last_left_at=T), 3, T + W - 1, (LEAVING, "leaving")),
    # ... a rank that said done may leave first for as long as it likes
    (EndEvidence(ranks=4, gone=1, done=1, heartbeats=4), 3, T + 10 * W, (LEAVING, "leaving")),
    # 5. all gone, but apart (the last one long after the first): not an end
    (EndEvidence(ranks=4, gone=4, end_line="Training completed.", first_left_at=T, last_left_at=T + W + 1),
     0, T + W + 2, (FAILURE, "left_apart")),
    # 6. every heartbeat said done
    (EndEvidence(ranks=4, gone=4, done=4, heartbeats=4), 0, T + 10, (FINISHED, "heartbeats_done")),
    # 7. an end line (a trainer's or the launcher's), ranks together
    (EndEvidence(ranks=4, gone=4, end_line="worker group successfully finished", first_left_at=T,
                 last_left_at=T + 10), 0, T + 10, (FINISHED, "end_line")),
    # ... heartbeats not all done but an end line: still the end line's row
    (EndEvidence(ranks=4, gone=4, done=1, heartbeats=4, end_line="Training completed.", first_left_at=T,
                 last_left_at=T), 0, T + 10, (FINISHED, "end_line")),
    # 8. together, the first to go ended on a stop request and nothing said done: cancelled or
    # preempted, not a clean end (a warning job_gone)
    (EndEvidence(ranks=4, gone=4, first_left_at=T, last_left_at=T + 1,
                 first_stop="rank 0 (pid 7) terminated (signal 15)"), 0, T + 10, (FAILURE, "stopped")),
    # ... also when the gravest line of the end is only the launcher saying it got the stop
    # (torch elastic on a scancel: `Received 15 death signal`, `SignalException ... got signal: 15`)
    (EndEvidence(ranks=4, gone=4, first_left_at=T, last_left_at=T + 1, first_stop="rank 1 (pid 8) terminated (signal 15)",
                 failure_line="launcher_exit_report: torch.distributed.elastic.multiprocessing.api.SignalException: "
                              "Process 6 got signal: 15"), 0, T + 10, (FAILURE, "stopped")),
    (replace(BLIND, failure_line="launcher_exit_report: [WARNING] Received 15 death signal, shutting down workers"),
     0, T + 10, (FAILURE, "stopped")),
    # ... but a real failure line, or a rank's own failing exit first, is still a crash
    (EndEvidence(ranks=4, gone=4, first_left_at=T, last_left_at=T + 1, first_stop="rank 1 (pid 8) terminated (signal 15)",
                 failure_line="oom_npu: NPU out of memory"), 0, T + 10, (FAILURE, "failure_line")),
    (EndEvidence(ranks=4, gone=4, first_left_at=T, last_left_at=T + 1, first_exit="rank 1 (pid 8) exit status 1",
                 failure_line="launcher_exit_report: SignalException: Process 6 got signal: 15"), 0, T + 10,
     (FAILURE, "exit_status")),
    (replace(BLIND, failure_line="launcher_exit_report: SignalException: Process 6 got signal: 3"), 0, T + 10,
     (FAILURE, "failure_line")),
    # ... but a stop after the end line or every heartbeat's done is the end's teardown
    (EndEvidence(ranks=4, gone=4, end_line="Training completed.", first_left_at=T, last_left_at=T,
                 first_stop="the launcher (pid 6) terminated (signal 15)"), 0, T + 10, (FINISHED, "end_line")),
    (EndEvidence(ranks=4, gone=4, done=4, heartbeats=4, first_stop="rank 0 (pid 7) interrupted (signal 2)"),
     0, T + 10, (FINISHED, "heartbeats_done")),
    # 9. together, no exit status readable and nothing said done: not a clean end (a warning)
    (BLIND, 0, T + 10, (FAILURE, "status_unknown")),
    # ... while an end line, every heartbeat's done or a failure sign still decide without statuses
    (replace(BLIND, end_line="Process 41237 exits successfully."), 0, T + 10, (FINISHED, "end_line")),
    (replace(BLIND, done=4, heartbeats=4), 0, T + 10, (FINISHED, "heartbeats_done")),
    (replace(BLIND, failure_line="launcher_exit_report: pretrain.py FAILED"), 0, T + 10, (FAILURE, "failure_line")),
    # 10. together, every exit status 0 (the kernel's process events), no failure sign: a quiet end
    (QUIET, 0, T + 10, (FINISHED, "left_together")),
])
def test_decision_table_rows(ev, running, now, want):
    assert judged(ev, running, now) == want


def test_the_window_edge_is_exclusive_and_failure_signs_need_no_window():
    ev = EndEvidence(ranks=2, gone=2, first_left_at=T, last_left_at=T + W, exit_source="process events")
    assert judged(ev) == (FINISHED, "left_together")  # exactly the window apart: together
    assert judged(EndEvidence(ranks=2, gone=1, first_left_at=T), 1, T + W) == (LEAVING, "leaving")


def test_reasons_name_the_evidence():
    v = judge_end(EndEvidence(ranks=8, gone=8, end_line="Training completed."), 0, T, W)
    assert "Training completed." in v.reason
    v = judge_end(EndEvidence(ranks=8, gone=8, failure_line="oom_npu: NPU out of memory"), 0, T, W)
    assert "NPU out of memory" in v.reason and v.failure


def test_end_lines_in_the_wordings_of_trainers_and_launchers():
    pats = [re.compile(p) for p in load_config_text("discovery: {enabled: true}\n").discovery.end_patterns]
    ends = [
        b"Training completed. Do not forget to share your model on huggingface.co/models =)",  # HF Trainer
        b"rank 0: training complete",
        b"`Trainer.fit` stopped: `max_epochs=3` reached.",  # Lightning
        b"[after training is done] datetime: 2026-11-30 10:15:00",  # Megatron
        b"INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. "
        b"Waiting 300 seconds for other agents to finish.",  # torchrun's agent
        b"[2026-11-30 10:15:00,123] [INFO] [launch.py:351:main] Process 4242 exits successfully.",  # DeepSpeed
        # MindSpore msrun (mindspore/parallel/cluster/process_entity/_api.py, join_processes)
        b"[INFO] ME(162078:281473590168608,MainProcess):2025-03-10-09:40:12.444.000 "
        b"[mindspore/parallel/cluster/process_entity/_api.py:330] All workers successfully exit!",
    ]
    for line in ends:
        assert end_line([b"iteration 5 | loss 2.0\n" + line + b"\n"], pats) == line.decode().strip(), line
    assert end_line([b"iteration 5 | loss 2.0\nsaving checkpoint\n"], pats) == ""
    # An epoch's end is not the job's: a preemption during the checkpoint after it read as a clean end.
    assert end_line([b"Epoch 1/3: training complete, saving checkpoint...\n"], pats) == ""
    assert end_line([b"[Epoch 2] training finished, evaluating\n"], pats) == ""
    # ... but a stage or phase in a file or logger name, or an epoch count before a sentence's end, is no epoch's end.
    for line in (b"[INFO] stage2_sft.py:212 >> Training complete.", b"Epoch 10/10 done. Training complete!",
                 b"ZeRO stage 3: training finished in 3h", b"2026-12-06 | phase1_pretrain | INFO | training finished"):
        assert end_line([line + b"\n"], pats) == line.decode(), line
    # The shipped example config lists its own patterns: the same holds there.
    from tests.helpers import REPO
    from watchdog.config import load_config

    shipped = [re.compile(p) for p in load_config(str(REPO / "config" / "npu-watchdog.example.yaml")).discovery.end_patterns]
    assert end_line([b"Epoch 1/3: training complete, saving checkpoint...\n"], shipped) == ""
    assert end_line([b"rank 0: training complete\n"], shipped) == "rank 0: training complete"
    assert end_line([b"\xff\xfe" * 100 + b"\x00\n"], pats) == ""  # bad bytes: no crash, no end


def test_failure_lines_come_from_the_log_rules_of_warning_and_above():
    m = failure_matcher(load_config_text("discovery: {enabled: true}\n"))
    oom = (b"iteration 9 | loss 2.0\nRuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; "
           b"60.97 GiB total capacity; 57.80 GiB already allocated)\n")
    got = failure_line([b"Training completed.\n", oom], m)
    assert "NPU out of memory" in got and got.split(":")[0] in {r.id for r in m.rules}
    assert failure_line([b"iteration 9 | loss 2.0\nTraining completed.\n"], m) == ""
    assert failure_line([b"Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: x\n"], m) != ""
    # The root cause, not the traceback header above it, is the line that explains the exit.
    got = failure_line([b"Traceback (most recent call last):\n  File \"t.py\", line 9\n" + oom.split(b"\n", 1)[1]], m)
    assert "NPU out of memory" in got and not got.startswith("python_traceback")


def test_failure_matchers_hold_no_re2_program():
    """The tails they read are a few 8 KiB pieces at a job's end: on Python's engine they cost
    the idle daemon nothing, where two RE2 programs held 3.2 MB of its resident memory for life
    (docs/benchmarks.md); the results are the same (the shapes tests run both engines)."""
    config = load_config_text("discovery: {enabled: true}\n")
    for generic in (False, True):
        m = failure_matcher(config, generic=generic)
        assert m is not None and m.engine == "re" and m._bulk is None


def test_a_failure_shape_alone_never_decides_an_end_but_names_the_cause():
    """A generic vocabulary rule's line (an exception's last line printed without its frames, which
    a job that handled the error prints too) is not a failure sign: a job whose ranks all exit 0
    after logging `ValueError: bad value in config` ended cleanly. When another sign says the job
    failed (the first to go exited 1), that line is the lead the page names."""
    config = load_config_text("discovery: {enabled: true}\n")
    handled = [b"step 90 | loss 2.0\nValueError: bad value in config\nTraining completed.\n"]
    assert failure_line(handled, failure_matcher(config)) == ""
    shape = failure_line(handled, failure_matcher(config, generic=True))
    assert shape.startswith("traceback_generic: ") and shape.endswith("ValueError: bad value in config")
    assert judged(replace(QUIET, shape_line=shape)) == (FINISHED, "left_together")

    from watchdog.detectors.liveness import _job_gone
    from watchdog.observations import JobState, ProcessObservation
    failed = replace(QUIET, shape_line=shape, first_exit="rank 1 (pid 8) exit status 1",
                     first_exit_zh="rank 1 (pid 8) 退出码 1")
    verdict = judge_end(failed, 0, T + 10, W)
    assert (verdict.outcome, verdict.row) == (FAILURE, "exit_status")
    obs = ProcessObservation(processes=(), jobs=(JobState(name="j", first_seen_at=T - 100, end=failed),))
    page = _job_gone({"host": "h"}, obs, T, T + 10, verdict)
    assert "rank 1 (pid 8) exit status 1 first" in page.summary
    assert page.summary.endswith("the last failure-shaped line: ValueError: bad value in config"), page.summary
    assert "最后一条疑似失败的日志行：ValueError: bad value in config" in page.details["said"]["zh"]


def test_a_rule_that_needs_a_run_of_lines_is_no_failure_sign_alone():
    """A dynamic loss scaler's routine overflow skip and Megatron's `skipped iterations: 1` are
    lines of rules that fire on a trend or a count: one of them in a finished job's last lines
    turned its clean end into a critical `job_gone`."""
    m = failure_matcher(load_config_text("discovery: {enabled: true}\n"))
    tails = [b"[INFO] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
             b" iteration      100/     100 | lm loss: 2.1 | loss scale: 1.0 | number of skipped iterations:   1 |\n"
             b"Training completed. Do not forget to share your model!\n"]
    assert failure_line(tails, m) == ""
    assert not any(r.threshold or r.trend for r in m.rules)
    assert {"fp16_loss_scale_collapse", "skipped_iterations_repeated"} <= {
        r.id for r in load_config_text("discovery: {enabled: true}\n").probes.logs.ruleset()}


def test_the_last_lines_are_read_without_colour_codes_as_the_logs_probe_reads_them():
    """A rank's coloured last lines (`exitcode  : ESC[1;31m-11`): the logs probe strips colour
    codes before matching, the end-of-job reading did not, so the line the live probe reported
    was missed at the end, and the evidence kept the escapes."""
    config = load_config_text("discovery: {enabled: true}\n")
    tail = b"step 9 | loss 2.0\n  exitcode  : \x1b[1;31m-11\x1b[0m (pid: 4242)\n"
    got = failure_line([tail], failure_matcher(config))
    assert "-11" in got and "\x1b" not in got
    pats = [re.compile(p) for p in config.discovery.end_patterns]
    assert end_line([b"\x1b[32mtraining complete\x1b[0m\n"], pats) == "training complete"


def test_a_failure_the_job_went_on_from_is_not_how_it_ended():
    """A handled traceback (frames and all) followed by the training's end line, or the agent's
    restart of the worker group followed by the new attempt's lines, is not the end's failure
    line: only what a tail holds after its last end or restart line counts. A crash after the end
    line still does."""
    config = load_config_text("discovery: {enabled: true}\n")
    m = failure_matcher(config)
    ends = [re.compile(p) for p in config.discovery.end_patterns]
    handled = (b"Traceback (most recent call last):\n  File \"train.py\", line 80, in save\n"
               b"OSError: [Errno 28] No space left on device\nstep 410 | loss 1.9\nTraining completed.\n")
    assert failure_line([handled], m) != ""  # without the end patterns: as before
    assert failure_line([handled], m, ends) == ""
    failed = (b"ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 1 "
              b"(pid: 4242) of binary: /usr/bin/python3\n")
    restart = (b"WARNING:torch.distributed.elastic.agent.server.api:[default] Worker group FAILED. "
               b"2/3 attempts left; will restart worker group\n")
    assert failure_line([failed], m, ends).startswith("launcher_exit_report: ")
    assert failure_line([failed + restart + b"step 12 | loss 2.2\n"], m, ends) == ""
    crashed_after = b"Training completed.\nFatal Python error: Segmentation fault\n"
    assert "Segmentation fault" in failure_line([crashed_after], m, ends)
    # Each tail is read on its own: another file's end line hides nothing.
    oom = b"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"
    assert "out of memory" in failure_line([b"Training completed.\n", oom], m, ends)


def test_an_earlier_attempts_log_file_is_not_read_at_the_end(tmp_path):
    """torchrun's `--log-dir` keeps one folder per attempt: the failing attempt's OOM sits in
    attempt_0's rank file, the agent's restart and success lines in the launcher's file. A file
    last written before the current attempt's ranks started holds nothing of how it ended."""
    import os
    import time

    from watchdog.discovery.feed import DiscoveryFeed
    from watchdog.discovery.scan import ScanOptions
    from watchdog.probes.discovered import DiscoveredProcessProbe, _Job

    config = load_config_text("discovery: {enabled: true}\n")
    old = tmp_path / "attempt_0" / "3" / "stderr.log"
    new = tmp_path / "attempt_1" / "3" / "stderr.log"
    launcher = tmp_path / "launcher.log"
    for path, text in ((old, b"step 40 | loss 2.1\nRuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"),
                       (new, b"step 900 | loss 1.2\n"),
                       (launcher, b"WARNING:torch.distributed.elastic.agent.server.api:[default] Worker group FAILED. "
                                  b"2/3 attempts left; will restart worker group\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
    now = time.time()
    os.utime(old, (now - 120, now - 120))  # attempt 0 ended two minutes ago; attempt 1 started a minute ago
    probe = DiscoveredProcessProbe(config, DiscoveryFeed(ScanOptions()))
    try:
        job = _Job(name="j", first_seen_at=now - 300, expected=None, launcher_pid=None,
                   logs={str(old), str(new)}, launcher_logs={str(launcher)}, started={3: now - 60})
        assert probe._evidence(job).failure_line == ""
        job.started = {}  # no attempt start known: every file is read, as before
        assert "out of memory" in probe._evidence(job).failure_line
    finally:
        probe.close()


def test_a_crash_page_names_who_went_and_how_even_when_the_failure_line_does_not():
    """Rank 1 segfaults under torchrun: its agent prints `failed (exitcode: -11) local_rank: 1
    (pid: N)` and then its error summary, headed `train.py FAILED`. Both are the same rule's lines,
    so the first used to win and the page said only "all training processes are gone"; the line
    naming the rank and the signal wins the tie. Where no line names them (msrun's `kill all
    other workers`), the kernel's process events still do."""
    from watchdog.detectors.liveness import _job_gone
    from watchdog.observations import JobState, ProcessObservation

    config = load_config_text("discovery: {enabled: true}\n")
    launcher = [b"============================================================\ntrain.py FAILED\n"
                b"------------------------------------------------------------\n"
                b"E1201 torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -11) local_rank: 1 "
                b"(pid: 4242) of binary: /usr/bin/python\n"]
    line = failure_line(launcher, failure_matcher(config))
    assert "failed (exitcode: -11) local_rank: 1" in line, line
    ev = EndEvidence(ranks=2, gone=2, first_left_at=T, last_left_at=T + 1, failure_line=line,
                     first_exit="rank 1 (pid 4242) segmentation fault (signal 11)")
    verdict = judge_end(ev, 0, T + 10, W)
    page = _job_gone({"host": "h"}, ProcessObservation(processes=(), jobs=(JobState("j", T - 100, end=ev),)),
                     T, T + 10, verdict)
    assert "rank 1 segmentation fault (signal 11)" in page.summary, page.summary

    quiet = replace(ev, failure_line="launcher_exit_report: There's worker exits with exception, kill all other workers.",
                    first_exit="rank 1 (pid 4242) aborted (signal 6)", first_exit_zh="rank 1（pid 4242）中止（信号 6）")
    verdict = judge_end(quiet, 0, T + 10, W)
    assert verdict.row == "failure_line"
    page = _job_gone({"host": "h"}, ProcessObservation(processes=(), jobs=(JobState("j", T - 100, end=quiet),)),
                     T, T + 10, verdict)
    assert page.summary.endswith(": rank 1 (pid 4242) aborted (signal 6) first"), page.summary
    assert "rank 1（pid 4242）中止（信号 6）" in page.details["said"]["zh"]


def test_a_stop_only_the_launcher_reported_is_worded_in_each_language():
    """The ranks' exit statuses are unknown and the launcher's own stop report is the only word
    (torch elastic on a scancel): the page names the launcher and quotes its line, in English
    words for the English message and Chinese words for the Chinese one (the line itself verbatim)."""
    from watchdog.detectors.liveness import _job_gone
    from watchdog.observations import JobState, ProcessObservation

    ev = replace(BLIND, failure_line="launcher_exit_report: [WARNING] Received 15 death signal, shutting down workers")
    verdict = judge_end(ev, 0, T + 10, W)
    assert (verdict.outcome, verdict.row) == (FAILURE, "stopped")
    page = _job_gone({"host": "h"}, ProcessObservation(processes=(), jobs=(JobState("j", T - 100, end=ev),)),
                     T, T + 10, verdict)
    line = "[WARNING] Received 15 death signal, shutting down workers"
    assert f"the launcher ({line}) first: cancelled or preempted?" in page.summary, page.summary
    zh = page.details["said"]["zh"]
    assert f"启动器（{line}） 最先退出，被取消还是被抢占？" in zh and "the launcher" not in zh, zh

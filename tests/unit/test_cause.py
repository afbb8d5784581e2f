"""Cause of death: which source explains a vanished rank, in which order, cut and redacted; the
last-lines ring's cost."""

from __future__ import annotations

import time

from watchdog.config.schema import Config
from watchdog.detectors.cause import cause_of_death, errorish_tail, explain
from watchdog.core.findings import Finding
from watchdog.logrules.lastlines import LastLines, LastLinesRing, tail_lines
from watchdog.observations import KernelEvent, KernelObservation, ProcessObservation
from watchdog.probes.logs import ActiveMatch, LogProbeObservation
from watchdog.core.state import StateStore

CFG = Config.model_validate({"node": {"name": "n1"}})


def view(kernel=(), active=(), last=(), discovered=True):
    store = StateStore()
    store.put("kernel", KernelObservation(recent=tuple(kernel)))
    store.put("logs", LogProbeObservation(events=(), active=tuple(active), last_lines=tuple(last)))
    store.put("process", ProcessObservation(processes=(), discovered=discovered))
    return store.view()


def kill(pid):
    return KernelEvent(seq=9, time=time.time(), rule="kernel_oom_kill", category="oom", severity="critical",
                       title="killed by the kernel's OOM killer",
                       text=f"Memory cgroup out of memory: Killed process {pid} (python3)", pid=pid)


def match(rank, job="j"):
    now = time.time()
    return ActiveMatch(rule="oom_torch_npu", category="oom", severity="critical", role="root", title="NPU out of memory",
                       rank=rank, source="train", path=f"/l/rank{rank}.log", first_at=now, last_at=now, count=1,
                       summary="RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB",
                       evidence=("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB",), job=job)


def lines(rank, *text, job="j", path=None):
    return LastLines(path=path or f"/l/rank{rank}.log", source="train", job=job, rank=rank, lines=tuple(text),
                     at=time.time())


def test_sources_in_order_kernel_then_log_rule_then_launcher_then_last_lines():
    launcher = lines(None, "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
                           "local_rank: 1 (pid: 4242) of binary: /usr/bin/python3", path="/l/launcher.log")
    errors = lines("1", "step 10", "ValueError: bad shard", "step 11")
    full = view(kernel=[kill(4242)], active=[match("1")], last=[launcher, errors])
    assert cause_of_death(full, CFG, [(4242, 1)], "j").kind == "kernel"
    assert cause_of_death(view(active=[match("1")], last=[launcher, errors]), CFG, [(4242, 1)], "j").kind == "log"
    c = cause_of_death(view(last=[launcher, errors]), CFG, [(4242, 1)], "j")
    assert c.kind == "launcher" and "pid 4242 killed (signal 9)" in c.reason
    assert c.zh == "启动器报告进程 4242 被杀死（信号 9）"
    c = cause_of_death(view(last=[errors]), CFG, [(4242, 1)], "j")
    assert c.kind == "last_lines" and c.lines == ("ValueError: bad shard",)
    assert cause_of_death(view(last=[lines("1", "step 10")]), CFG, [(4242, 1)], "j") is None


def test_other_pids_ranks_and_jobs_do_not_explain():
    other = view(kernel=[kill(1)], active=[match("2")], last=[lines("1", "Error: x", job="other")])
    assert cause_of_death(other, CFG, [(4242, 1)], "j") is None


def test_launcher_reports_of_torchrun_and_mpirun():
    """Read by the one parser of exit reports, said in its one wording, in both languages."""
    for text, reason, zh in [
        ("exitcode  : -11 (pid: 77)", "pid 77 segmentation fault (signal 11)", "进程 77 段错误（信号 11）"),
        ("traceback : Signal 6 (SIGABRT) received by PID 77", "pid 77 aborted (signal 6)", "进程 77 异常中止（信号 6）"),
        ("failed (exitcode: 1) local_rank: 0 (pid: 77) of binary: /usr/bin/python", "pid 77 exit status 1",
         "进程 77 退出码 1"),
        ("mpirun noticed that process rank 3 with PID 77 on node n1 exited on signal 9 (Killed).",
         "pid 77 killed (signal 9)", "进程 77 被杀死（信号 9）"),
    ]:
        c = cause_of_death(view(last=[lines(None, "x", text)]), CFG, [(77, 0)], "j")
        assert c is not None and reason in c.reason and zh in c.zh, (text, c)
        assert "SIG" not in c.reason and "OOM" not in c.reason


def test_a_traceback_tail_is_kept_whole_and_lines_are_cut_and_redacted():
    tb = ["step 5", "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
          "    main()", "RuntimeError: boom HF_TOKEN=hf_abcdefghijklmnop " + "x" * 1000]
    assert errorish_tail(tb) == tb[1:]
    c = cause_of_death(view(last=[lines("1", *tb)]), CFG, [(5, 1)], "j")
    assert c.lines[0].startswith("Traceback") and len(c.lines) == 4
    assert "hf_abcdefghijklmnop" not in " ".join(c.lines) and "[REDACTED]" in c.lines[-1]
    assert max(len(x) for x in c.lines) <= 300


def test_explain_puts_the_cause_in_summary_details_and_evidence():
    f = Finding(rule="rank_missing", severity="critical", summary="rank 1 (pid 4242) exited",
                labels={"host": "n1", "training_job": "j", "rank": "1", "pid": "4242"})
    got = explain(view(kernel=[kill(4242)]), CFG, f)
    assert got.summary.startswith("rank 1 (pid 4242) exited: killed by the kernel's OOM killer")
    assert got.details["cause"]["kind"] == "kernel" and got.evidence
    assert got.key == f.key  # the cause never changes the alert's identity
    assert explain(view(), CFG, f) == f
    other = Finding(rule="npu_idle", severity="warning", summary="s", labels={"host": "n1"})
    assert explain(view(kernel=[kill(4242)]), CFG, other) is other


def test_the_ring_looks_only_at_a_slice_tail():
    ring = LastLinesRing(keep=3)
    data = b"".join(b"line %d\n" % i for i in range(100000))
    ring.feed("/f", "train", None, "0", data, len(data), 1.0)
    ring.feed("/f", "train", None, "0", b"last one\n", 9, 2.0)
    (ll,) = ring.snapshot()
    assert ll.lines == ("line 99998", "line 99999", "last one") and ll.at == 2.0
    assert tail_lines(b"a\n\n\nb\r\npartial", 7, 5) == ("a", "b")  # complete lines only, blanks skipped
    big = LastLinesRing(keep=2, max_files=2)
    for i in range(5):
        big.feed(f"/f{i}", "train", None, None, b"x\n", 2, 0.0)
    assert [x.path for x in big.snapshot()] == ["/f3", "/f4"]


def test_a_stall_names_a_hung_task_of_one_of_its_ranks():
    from watchdog.observations import ProcessInfo

    store = StateStore()
    hung = KernelEvent(seq=3, time=time.time(), rule="kernel_hung_task", category="custom", severity="warning",
                       title="task blocked in the kernel (hung task)",
                       text="INFO: task python3:31 blocked for more than 120 seconds.", pid=31)
    store.put("kernel", KernelObservation(recent=(hung,)))
    procs = tuple(ProcessInfo(pid=p, rank=r, state="disk-sleep", create_time=0, cpu_seconds=0, cpu_delta=None,
                              rss_bytes=0, threads=1, job="j") for p, r in ((30, 0), (31, 1)))
    store.put("process", ProcessObservation(processes=procs, discovered=True))
    f = Finding(rule="stall", severity="critical", summary="job j stalled for 10m",
                labels={"host": "n1", "training_job": "j"})
    got = explain(store.view(), CFG, f)
    assert "hung task" in got.summary and "python3:31" in got.summary
    assert got.details["cause"]["kind"] == "kernel"


def test_a_launchers_report_pushed_out_of_the_last_lines_is_still_found():
    """`torchrun ... > train.log`: the surviving ranks keep logging into the same file, so within
    seconds the launcher's report of a rank's exit is no longer among the file's last lines; the
    ring keeps the file's newest error-looking lines apart, and the cause is still found."""
    from watchdog.logrules.lastlines import KEEP_LINES, LastLinesRing

    ring = LastLinesRing()
    report = ("E1201 torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -15) "
              "local_rank: 1 (pid: 4242) of binary: /usr/bin/python3")
    ring.feed("/l/train.log", "train", "j", None, (report + "\n").encode(), len(report) + 1, 1.0)
    chatter = "".join(f"rank0 iteration {i} loss 1.0\n" for i in range(KEEP_LINES * 3)).encode()
    ring.feed("/l/train.log", "train", "j", None, chatter, len(chatter), 2.0)
    (ll,) = ring.snapshot()
    assert report not in ll.lines and ll.errors == (report,)


def test_a_generic_match_is_asked_last():
    """A generic vocabulary match (one line in a failure's shape) explains a death only when
    nothing more specific does: the rank's last error lines come first (they hold that line and
    the lines around it)."""
    from dataclasses import replace
    shape = replace(match("1"), rule="traceback_generic", category="traceback", severity="warning",
                    role="cascade", title="exception without its traceback (generic wording)",
                    summary="ValueError: bad shard", evidence=("ValueError: bad shard",), generic=True)
    errors = lines("1", "step 10", "ERROR loader: shard 3 unreadable", "ValueError: bad shard", "step 11")
    c = cause_of_death(view(active=[shape], last=[errors]), CFG, [(4242, 1)], "j")
    assert c.kind == "last_lines" and c.lines == ("ERROR loader: shard 3 unreadable", "ValueError: bad shard")
    c = cause_of_death(view(active=[shape], last=[lines("1", "step 10")]), CFG, [(4242, 1)], "j")
    assert c.kind == "log" and "ValueError: bad shard" in c.reason
    # An exact rule's match still comes before the last lines.
    assert cause_of_death(view(active=[shape, match("1")], last=[errors]), CFG, [(4242, 1)], "j").kind == "log"

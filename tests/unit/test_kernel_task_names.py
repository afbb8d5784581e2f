"""Which process a kernel record names: the kernel's own pid and command name, whatever a user
named their process (`prctl(PR_SET_NAME)` takes any 15 bytes: `python3[4242] `, `x,pid=4242,`),
and a rank only when both the pid and the command name are the rank's."""

from __future__ import annotations

import time

import pytest

from watchdog.config.schema import Config
from watchdog.core.state import StateStore
from watchdog.detectors import kernel as kdet
from watchdog.logrules.kernel import load_kernel_pack, task_of
from watchdog.logrules.matcher import Matcher
from watchdog.observations import KernelEvent, KernelObservation, ProcessInfo, ProcessObservation, kmsg_comm

PACK = {k.rule.id: k for k in load_kernel_pack()}
MATCHER = Matcher([k.rule for k in PACK.values()], engine="re")


def judge(text: str):
    return [(r.id, *task_of(PACK[r.id], text)) for r in MATCHER.match_text(text)]


@pytest.mark.parametrize("text,expected", [
    # The real line of a process named `python3[4242] ` (captured on a 6.18 kernel, x86_64).
    ("traps: python3[4242] [21216] trap invalid opcode ip:7faa25f5e000 sp:7ffcd12225d8 error:0 "
     "in dev/zero[0,7faa25f5e000+1000]", ("kernel_trap", 21216, "python3[4242] ")),
    ("traps: python3[1234] general protection fault ip:7f00 sp:7ffe error:0 in libfoo.so[7f00+1000]",
     ("kernel_trap", 1234, "python3")),
    ("traps: a[4242] trap b[777] trap invalid opcode ip:55 sp:7ff error:0 in x[55+1]",
     ("kernel_trap", 777, "a[4242] trap b")),
    ("python3[4242]: segf[777]: segfault at 0 ip 00007f685d385ad8 sp 00007fffc01d3ff8 error 4 in libc.so.6[7f+1]",
     ("kernel_segfault", 777, "python3[4242]: segf")),
    ("python3[6477]: segfault at 0 ip 00007f685d385ad8 sp 00007fffc01d3ff8 error 4 in libc.so.6[7f+1]",
     ("kernel_segfault", 6477, "python3")),
    ("INFO: task x:4242 y:777 blocked for more than 120 seconds.", ("kernel_hung_task", 777, "x:4242 y")),
    ("watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [a:4242]:77]", ("kernel_soft_lockup", 77, "a:4242]")),
    ("Memory cgroup out of memory: Killed process 6478 (python3) total-vm:1kB, anon-rss:1kB",
     ("kernel_oom_kill", 6478, "python3")),
    ("Out of memory: Killed process 777 (x) (4242) total-vm:1kB", ("kernel_oom_kill", 777, "x) (4242")),
    # The summary line is read from its end: a cgroup path (a user's own name) before it may say anything.
    ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/u/,task=x,pid=4242,"
     ",task_memcg=/u/,task=x,pid=4242,uid=0,task=python3,pid=777,uid=1000", ("kernel_oom_kill", 777, "python3")),
])
def test_the_kernels_own_pid_and_name_are_taken(text, expected):
    assert judge(text)[0] == expected


def event(pid: int, comm, **kw) -> KernelEvent:
    return KernelEvent(seq=kw.pop("seq", 1), time=time.time(), rule="kernel_trap", category="crash",
                       severity="critical", title="trap", text=f"traps: {comm}[{pid}] trap invalid opcode",
                       pid=pid, comm=comm, **kw)


def view(events, ranks):
    store = StateStore()
    store.put("kernel", KernelObservation(recent=tuple(events)))
    store.put("process", ProcessObservation(processes=tuple(ranks)))
    return store.view()


def rank(pid: int, name: str) -> ProcessInfo:
    return ProcessInfo(pid=pid, rank=0, state="running", create_time=0, cpu_seconds=0, cpu_delta=None,
                       rss_bytes=0, threads=1, job="llama", name=name)


CFG = Config.model_validate({"node": {"name": "n1"}, "probes": {"kernel": {"enabled": True}}})


def test_a_rank_is_named_only_when_the_pid_and_the_name_are_its():
    (f,) = kdet.detect(view([event(500, "evil")], [rank(500, "python3")]), CFG)
    assert "rank" not in f.labels and f.severity == "info"
    assert kdet.kernel_events_for_pids(view([event(500, "evil")], [rank(500, "python3")]), [500]) == ()
    (f,) = kdet.detect(view([event(500, "python3")], [rank(500, "python3")]), CFG)
    assert f.labels["rank"] == "0" and f.severity == "critical"
    # The process probe keeps a long command's full name; the kernel prints its first 15 bytes.
    long = "train_llama_70b_pretrain"
    (f,) = kdet.detect(view([event(501, long[:15])], [rank(501, long)]), CFG)
    assert f.labels["rank"] == "0"
    # A rule that does not say where the name is (a user rule with a pid only): the pid decides.
    (f,) = kdet.detect(view([event(502, None)], [rank(502, "python3")]), CFG)
    assert f.labels["rank"] == "0"


def test_names_are_compared_as_the_kernel_log_prints_them():
    assert kmsg_comm("python3") == "python3"
    assert kmsg_comm("a\\b\x01") == "a\\x5cb\\x01"
    assert kmsg_comm("pt_main_thread_and_more") == "pt_main_thread_"
    assert event(1, "a\\x5cb").names(["a\\b"]) and not event(1, "a\\b").names(["a\\b"])
    assert event(1, "x").names([]) and event(1, "x").names([""])

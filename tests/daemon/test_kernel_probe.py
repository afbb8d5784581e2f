"""The kernel probe's pieces: /dev/kmsg records, the kernel rules, the probe on the real device
(its read position across a restart), the detector on synthetic views."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from tests.helpers import FIXTURES, TESTS

from watchdog.config.schema import Config
from watchdog.detectors import kernel as kdet
from watchdog.logrules.kernel import RuleError, kernel_ruleset, pid_of
from watchdog.parse.kmsg import KmsgFormatError, parse_record
from watchdog.logrules.matcher import Matcher
from watchdog.observations import KernelEvent, KernelObservation, ProcessInfo, ProcessObservation
from watchdog.probes.base import ProbeError
from watchdog.probes.kernel import STATE_FILE, KernelProbe
from watchdog.host.procstat import boot_time
from watchdog.core.state import StateStore

FIXTURE = FIXTURES / "kmsg" / "segfault_oom.kmsg"
SAMPLES = TESTS / "samples" / "corpus" / "device_and_kernel_logs.log"


def fixture_records():
    """The captured records, one per read (continuation lines start with a space)."""
    out = []
    for line in FIXTURE.read_bytes().splitlines(keepends=True):
        if line.startswith(b" ") and out:
            out[-1] += line
        else:
            out.append(line)
    return out


def judge(text: str):
    rules = kernel_ruleset()
    by_id = {k.rule.id: k for k in rules}
    hits = Matcher([k.rule for k in rules], engine="re").match_text(text)
    return [(r.id, pid_of(by_id[r.id], text)) for r in hits]


# -- records ------------------------------------------------------------------------------------

def test_real_records_parse_with_sequence_level_and_dictionary():
    recs = [parse_record(r) for r in fixture_records()]
    seqs = [r.seq for r in recs]
    assert seqs[:2] == [344, 345] and len(recs) > 60
    seg = recs[0]
    assert seg.level_name == "info" and seg.usec == 204056281
    assert seg.message.startswith("python3[6477]: segfault at 0 ip ")
    kill = next(r for r in recs if "Killed process" in r.message)
    assert kill.level_name == "err"
    dev = recs[-1]
    assert dict(dev.dictionary)["SUBSYSTEM"] == "acpi" and "\n" not in dev.message


@pytest.mark.parametrize("raw", [b"", b"no header at all", b"6,abc,1,-;text", b"6,1;short header",
                                 b"-1,2,3,-;negative", b"\xff\xfe;\x00"])
def test_malformed_records_are_a_clear_error(raw):
    with pytest.raises(KmsgFormatError):
        parse_record(raw)


def test_binary_and_oversized_records_never_crash():
    rec = parse_record(b"3,7,9,-;" + b"\xff\x00" * 20000 + b"\n")
    assert rec.seq == 7 and len(rec.message) <= 16384


# -- rules --------------------------------------------------------------------------------------

def test_real_segfault_and_oom_records_match_with_their_pid():
    got = [judge(parse_record(r).message) for r in fixture_records()]
    flat = [g for hits in got for g in hits]
    assert ("kernel_segfault", 6477) in flat
    assert flat.count(("kernel_oom_kill", 6478)) == 2  # the oom-kill summary and the Killed process line
    # The report's other lines (the stack, the memory table, `invoked oom-killer`) are no event.
    assert len(flat) == 3


@pytest.mark.parametrize("text,expected", [
    ("Out of memory: Killed process 1234 (python) total-vm:1kB", ("kernel_oom_kill", 1234)),
    ("Out of memory: Kill process 6033 (java) score 367 or sacrifice child", ("kernel_oom_kill", 6033)),
    ("traps: python3[1234] general protection fault ip:7f00 sp:7ffe error:0 in libfoo.so[7f00+1000]",
     ("kernel_trap", 1234)),
    ("traps: pt_main_thread[99] trap invalid opcode ip:55 sp:7ff error:0 in python3.10[55+1]", ("kernel_trap", 99)),
    ("INFO: task python3:4321 blocked for more than 120 seconds.", ("kernel_hung_task", 4321)),
    ("watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python3:77]", ("kernel_soft_lockup", 77)),
    ("NMI watchdog: Watchdog detected hard LOCKUP on cpu 34", ("kernel_soft_lockup", None)),
    ("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0)",
     ("kernel_memory_uncorrected", None)),
    ("EDAC MC0: 3 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0", ("kernel_memory_corrected", None)),
    ("pcieport 0000:00:03.0: AER: Uncorrected (Non-Fatal) error received: 0000:04:00.0",
     ("kernel_pcie_aer_uncorrected", None)),
    ("pcieport 0000:00:1c.5: AER: Corrected error received: 0000:03:00.0", ("kernel_pcie_aer_corrected", None)),
])
def test_kernel_wordings(text, expected):
    assert judge(text)[0] == expected


def test_ascend_driver_lines_of_the_sample_corpus():
    """The driver's own kernel lines, as kept in the log corpus (provenance in its SOURCES.md)."""
    lines = [ln.split("  ##>")[0] for ln in SAMPLES.read_text().splitlines() if "[ascend] [ERROR]" in ln]
    assert len(lines) >= 5
    ids = [judge(ln)[0][0] for ln in lines]
    assert ids[0] == "kernel_ascend_ts_exception"
    assert "kernel_ascend_device_lost" in ids and "kernel_ascend_driver_error" in ids


@pytest.mark.parametrize("text", [
    "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "Code: e1 ff ff ff c3 66 2e 0f 1f 84 00 00",
    "[ascend] [INFO] [drv_pcie] [devdrv_init_dev_num 2248] <systemd-udevd:4853:4853> Findout device.",
    "EXT4-fs (vda): mounted filesystem r/w without journal.",
    "oom_reaper: reaped process 6478 (python3), now anon-rss:0kB",
])
def test_near_misses_are_no_event(text):
    assert judge(text) == []


def test_user_rules_and_disable_are_checked():
    with pytest.raises(RuleError):
        kernel_ruleset(disable=["no_such_rule"])
    with pytest.raises(RuleError):
        kernel_ruleset(user_rules=[{"id": "kernel_segfault", "category": "crash", "patterns": ["x"]}])
    with pytest.raises(ValueError):
        Config.model_validate({"probes": {"kernel": {"rules": [{"id": "bad", "patterns": ["(?=x)"]}]}}})
    rules = kernel_ruleset(disable=["kernel_pcie_aer_corrected"])
    assert "kernel_pcie_aer_corrected" not in {k.rule.id for k in rules}


# -- the probe on the real /dev/kmsg ------------------------------------------------------------

def kmsg_writable() -> bool:
    return os.access("/dev/kmsg", os.R_OK | os.W_OK)


def marker_config(tmp_path, token: str) -> Config:
    return Config.model_validate({
        "paths": {"state_dir": str(tmp_path)},
        "probes": {"kernel": {"enabled": True, "rules": [
            {"id": "test_marker", "severity": "warning", "patterns": [f"{token} pid=\\d+"], "title": "test marker"}]}},
    })


def write_kmsg(text: str) -> None:
    with open("/dev/kmsg", "w") as fh:
        fh.write(text + "\n")


def collect_until(probe, pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        obs = probe.collect().value
        seen.extend(obs.events)
        if pred(seen):
            return seen
        time.sleep(0.05)
    return seen


@pytest.mark.skipif(not kmsg_writable(), reason="needs root (writes one marker record to /dev/kmsg)")
def test_a_restart_neither_replays_nor_skips_records(tmp_path):
    """Marker records this test writes itself, matched by a user rule (the machine's other records
    are counted but never asserted on)."""
    token = f"npu-watchdog-test-{uuid.uuid4().hex[:12]}"
    cfg = marker_config(tmp_path, token).probes.kernel
    first = KernelProbe(cfg, str(tmp_path))
    first.collect()  # the ring buffer's records so far
    write_kmsg(f"{token} pid=1")
    mine = lambda evs: [e for e in evs if token in e.text]  # noqa: E731
    assert len(mine(collect_until(first, mine))) == 1
    assert first.wait_change(0.01) is False  # caught up: nothing to wake for
    first.close()
    write_kmsg(f"{token} pid=2")  # written while "the daemon is down"
    second = KernelProbe(cfg, str(tmp_path))
    got = mine(collect_until(second, lambda evs: any("pid=2" in e.text for e in evs)))
    assert [e.text.split()[-1] for e in got] == ["pid=2"]  # pid=1 not replayed, pid=2 not skipped
    assert any("pid=1" in e.text for e in second.collect().value.recent)  # restored with its hold
    second.close()
    saved = (tmp_path / STATE_FILE)
    assert oct(saved.stat().st_mode & 0o777) == "0o600"


@pytest.mark.skipif(not kmsg_writable(), reason="needs root")
def test_another_boot_reads_the_ring_buffer_again(tmp_path):
    token = f"npu-watchdog-test-{uuid.uuid4().hex[:12]}"
    cfg = marker_config(tmp_path, token).probes.kernel
    write_kmsg(f"{token} pid=3")
    p = KernelProbe(cfg, str(tmp_path))
    assert collect_until(p, lambda evs: any(token in e.text for e in evs))
    p.close()
    p = KernelProbe(cfg, str(tmp_path))
    p.boot_id = "another-boot"  # what a reboot changes
    p.last_seq = None
    assert any(token in e.text for e in collect_until(p, lambda evs: any(token in e.text for e in evs)))
    p.close()


def test_overwritten_records_and_gaps_are_counted_never_fatal(tmp_path):
    """EPIPE (the kernel overwrote records not read yet) cannot be caused on a shared machine
    without flooding its log: the read is handed a stand-in that answers like the kernel."""
    cfg = Config.model_validate({"probes": {"kernel": {"enabled": True, "device": "/dev/null"}}}).probes.kernel
    p = KernelProbe(cfg, str(tmp_path))
    usec = int((time.time() - boot_time()) * 1e6)  # records of now, whatever the machine's uptime
    answers = [b"6,10,%d,-;first\n" % usec, BrokenPipeError(),
               b"6,15,%d,-;python3[9]: segfault at 0 ip 0 sp 0 error 4\n" % usec,
               b"garbage", b"6,15,%d,-;a duplicate of 15\n" % usec]

    def read(fd, n):
        if not answers:
            raise BlockingIOError()
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    p._read = read
    obs = p.collect().value
    assert [e.rule for e in obs.events] == ["kernel_segfault"] and obs.events[0].pid == 9
    assert obs.lost_total == 1 + 4 and obs.malformed_total == 1 and obs.last_seq == 15 and obs.records_total == 2


def test_an_unreadable_device_is_a_probe_failure(tmp_path):
    cfg = Config.model_validate({"probes": {"kernel": {"enabled": True, "device": str(tmp_path / "nope")}}})
    p = KernelProbe(cfg.probes.kernel, str(tmp_path))
    with pytest.raises(ProbeError, match="cannot read the kernel log"):
        p.collect()


def test_the_boot_identity_falls_back_to_the_boot_time(tmp_path):
    from watchdog.host.procstat import read_boot_id

    assert read_boot_id(str(tmp_path / "none")) == f"btime-{int(boot_time())}"
    assert read_boot_id() and not read_boot_id().startswith("btime-")


def test_a_damaged_state_file_starts_afresh(tmp_path):
    (tmp_path / STATE_FILE).write_text("{not json")
    cfg = Config.model_validate({"probes": {"kernel": {"enabled": True}}}).probes.kernel
    p = KernelProbe(cfg, str(tmp_path))
    assert p.last_seq is None and p.recent == []


# -- the detector -------------------------------------------------------------------------------

def event(rule="kernel_segfault", category="crash", severity="critical", pid=500, at=None, **kw):
    return KernelEvent(seq=kw.pop("seq", 1), time=at if at is not None else time.time(), rule=rule,
                       category=category, severity=severity, title="segmentation fault",
                       text=f"python3[{pid}]: segfault at 0 ip 0 sp 0 error 4 in libc.so.6", pid=pid, **kw)


def view_with(events, procs=(), gone=()):
    store = StateStore()
    store.put("kernel", KernelObservation(recent=tuple(events)))
    store.put("process", ProcessObservation(processes=tuple(procs), gone=tuple(gone)))
    return store.view()


def proc(pid, rank, job=None):
    return ProcessInfo(pid=pid, rank=rank, state="sleeping", create_time=0, cpu_seconds=0, cpu_delta=None,
                       rss_bytes=0, threads=1, job=job)


def cfg():
    return Config.model_validate({"node": {"name": "n1"}, "probes": {"kernel": {"enabled": True}}})


def test_a_record_naming_a_rank_is_that_ranks_finding():
    v = view_with([event(pid=500, job="llama", rank=3, npu=5), event(pid=500, seq=2, job="llama", rank=3, npu=5)])
    (f,) = kdet.detect(v, cfg())
    assert f.rule == "kernel_crash" and f.severity == "critical" and f.value == "2"
    assert {k: f.labels[k] for k in ("rank", "npu", "training_job")} == {"rank": "3", "npu": "5", "training_job": "llama"}
    assert "rank 3 (pid 500)" in f.summary and "segfault at 0" in f.summary


def test_a_gone_rank_of_the_process_probe_names_the_rank_without_discovery():
    (f,) = kdet.detect(view_with([event(pid=600)], gone=[proc(600, 1)]), cfg())
    assert f.labels["rank"] == "1" and f.severity == "critical"


def test_another_process_is_a_node_finding_of_lower_severity_and_old_records_expire():
    (f,) = kdet.detect(view_with([event(pid=700)]), cfg())
    assert "rank" not in f.labels and f.severity == "info" and "pid 700" in f.summary
    (f,) = kdet.detect(view_with([event(pid=701, rule="kernel_oom_kill", category="oom")]), cfg())
    assert f.severity == "info" and f.rule == "kernel_oom"
    (f,) = kdet.detect(view_with([event(pid=702, rule="kernel_hung_task", category="custom", severity="warning")]), cfg())
    assert f.severity == "warning" and f.rule == "kernel_event"
    dev = event(pid=None, rule="kernel_ascend_device_lost", category="device", device=1)
    (f,) = kdet.detect(view_with([dev]), cfg())
    assert f.severity == "critical" and f.labels["device"] == "1" and f.rule == "kernel_device"
    assert kdet.detect(view_with([event(pid=700, at=time.time() - 3600)]), cfg()) == []


def test_kernel_events_for_pids_is_scoped_to_the_pids():
    v = view_with([event(pid=1), event(pid=2, rule="kernel_oom_kill", category="oom"), event(pid=3)])
    assert [e.pid for e in kdet.kernel_events_for_pids(v, [2, 3])] == [2, 3]
    assert kdet.kernel_events_for_pids(v, []) == ()


def test_a_user_rule_may_name_the_pid():
    c = Config.model_validate({"probes": {"kernel": {"rules": [
        {"id": "my_kill", "patterns": ["reaper took \\d+"], "pid": "reaper took (\\d+)"}]}}})
    (k,) = [k for k in kernel_ruleset(user_rules=[r.as_rule_data() for r in c.probes.kernel.rules])
            if k.rule.id == "my_kill"]
    assert pid_of(k, "reaper took 812") == 812
    with pytest.raises(ValueError, match="exactly one group"):
        Config.model_validate({"probes": {"kernel": {"rules": [{"id": "x2", "patterns": ["a"], "pid": "a"}]}}})


def test_random_bytes_are_a_record_or_a_format_error_never_a_crash():
    import random

    rnd = random.Random(27)
    alphabet = b"0123456789,;-c \n\x00\xff=abc"
    for _ in range(5000):
        raw = bytes(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40)))
        try:
            rec = parse_record(raw)
        except KmsgFormatError:
            continue
        assert rec.seq >= 0 and 0 <= rec.level <= 7 and "\n" not in rec.message
        judge(rec.message)

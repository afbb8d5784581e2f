"""`npu-watchdog scan` as a real subprocess: JSON shape, timeline, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import FIXTURES, REPO, TESTS

SAMPLES = TESTS / "samples" / "logs"


def scan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "watchdog", "scan", *args], capture_output=True, text=True,
                          cwd=str(REPO), timeout=60)


def test_scan_json_shape_and_exit_1(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("step 1 loss 2.3\n"
                   "RuntimeError: NPU out of memory. Tried to allocate 1.00 GiB (NPU 0; 60 GiB total)\n"
                   "Traceback (most recent call last):\n"
                   "  File \"train.py\", line 3, in <module>\n"
                   "RuntimeError: boom\n"
                   "[E ProcessGroupHCCL.cpp:1] [Rank 0] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=1)\n")
    r = scan("--json", str(log))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"events", "first"}
    ev = doc["events"]
    assert [(e["line"], e["rule"], e["role"]) for e in ev] == [
        (2, "oom_torch_npu", "root"), (3, "python_traceback", "cascade"),
        (6, "hccl_collective_watchdog_timeout", "cascade")]
    for e in ev:
        assert set(e) == {"file", "line", "rule", "category", "severity", "role", "text"}
        assert e["file"] == str(log)
    assert ev[1]["text"] == "RuntimeError: boom"  # a traceback's summary is its last line
    assert doc["first"]["oom"]["line"] == 2 and set(doc["first"]) == {"oom", "traceback", "hccl"}


def test_scan_timeline_nothing_found_and_errors(tmp_path: Path) -> None:
    r = scan(str(SAMPLES / "near_misses.log"))
    assert r.returncode == 0 and "no failure signatures" in r.stdout
    r = scan(str(FIXTURES / "logs" / "plog_hccl_notify_wait_timeout_heartbeat_lost.log"))
    assert r.returncode == 1
    assert "Cascades" in r.stdout and "hccl_heartbeat_lost" in r.stdout
    assert scan(str(tmp_path / "missing.log")).returncode == 2
    assert scan("--rules", "bogus", str(SAMPLES / "oom.log")).returncode == 2
    # --rules restricts packs: the OOM sample has nothing for the nan pack
    r = scan("--json", "--rules", "nan", str(SAMPLES / "oom.log"))
    assert r.returncode == 0 and json.loads(r.stdout)["events"] == []


def test_scan_applies_config_rules(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("probes:\n  logs:\n    disable: [oom_torch_npu]\n    rules:\n"
                   "      - id: my_rule\n        patterns: ['checkpoint save failed']\n        severity: critical\n")
    log = tmp_path / "x.log"
    log.write_text("NPU out of memory. Tried to allocate 1 MiB\ncheckpoint save failed: disk full\n")
    r = scan("--json", "-c", str(cfg), str(log))
    assert r.returncode == 1, r.stderr
    assert [(e["rule"], e["category"]) for e in json.loads(r.stdout)["events"]] == [("my_rule", "custom")]


def test_scan_json_reports_crash_events(tmp_path: Path) -> None:
    """A native crash (no Python traceback) is a root `crash` event, before the peers' HCCL
    timeout it causes; real lines from the sample corpus."""
    corpus = TESTS / "samples" / "corpus"
    lines = [l.rsplit("  ##> ", 1)[0] for l in (corpus / "native_crashes.log").read_text().splitlines()]
    crash = [l for l in lines if l.startswith("Fatal Python error: Segmentation fault")][0]
    dump = [l for l in lines if l.startswith("Current thread 0x")][0]
    log = tmp_path / "rank1.log"
    log.write_text(f"{crash}\n\n{dump}\nSegmentation fault (core dumped)\n"
                   "[Rank 0] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=9, OpType=ALLREDUCE)\n")
    r = scan("--json", str(log))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [(e["line"], e["rule"], e["category"], e["role"]) for e in doc["events"]] == [
        (1, "crash_fatal_python_error", "crash", "root"), (4, "crash_shell_signal", "crash", "root"),
        (5, "hccl_collective_watchdog_timeout", "hccl", "cascade")]
    assert doc["first"]["crash"]["line"] == 1
    text = scan(str(log)).stdout
    assert "first native crash" in text and "Root causes" in text


def test_scan_report_prints_precision_and_recall(tmp_path: Path) -> None:
    r = scan("--report", str(SAMPLES.parent / "corpus"))
    assert r.returncode == 0, r.stderr
    assert "| crash |" in r.stdout and "| device |" in r.stdout and "unexpected alarm: 0" in r.stdout
    bad = tmp_path / "bad.log"
    bad.write_text("Segmentation fault (core dumped)  ##> -\n")  # annotated silent, but it fires
    r = scan("--report", str(bad))
    assert r.returncode == 1 and "| crash | 0 | 0 | 0 | 1 |" in r.stdout
    (tmp_path / "nomark.log").write_text("no annotation\n")
    r = scan("--report", str(tmp_path / "nomark.log"))
    assert r.returncode == 2 and "nomark.log:1" in r.stderr


def test_scan_report_scores_whole_failure_reports_from_the_sources_file(tmp_path: Path) -> None:
    """A folder whose SOURCES.md lists blocks (`file.log:START-END`) is also scored per failure report:
    a block counts once, caught when any of its failure lines is reported in its own category."""
    (tmp_path / "x_crash.log").write_text(
        "step 1  ##> -\n"
        "Segmentation fault (core dumped)  ##> ?crash\n"          # block 1: caught on this line
        "a driver line no rule knows  ##> ?crash\n"
        "step 2  ##> -\n"
        "another failure in words nobody wrote a rule for  ##> ?crash\n"   # block 2: missed
        "a healthy line  ##> -\n")                               # block 3: no failure line
    (tmp_path / "SOURCES.md").write_text("- a/b: https://example.invalid/1 (one) [x_crash.log] lines x_crash.log:1-3\n"
                                         "- a/b: https://example.invalid/2 (two) [x_crash.log] lines x_crash.log:4-5\n"
                                         "- a/b: https://example.invalid/3 (three) [x_crash.log] lines x_crash.log:6-6\n")
    r = scan("--report", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "Failure reports (the blocks its sources file lists that hold a failure line): 2; caught" in r.stdout
    assert "): 1 (50.0 %)." in r.stdout
    # two folders at once: blocks are named by file name alone, so no report score is printed
    other = tmp_path / "more"
    other.mkdir()
    (other / "x_crash.log").write_text("fine  ##> -\n")
    r = scan("--report", str(tmp_path), str(other))
    assert r.returncode == 0 and "Failure reports" not in r.stdout, r.stdout


def test_scan_count_prints_the_lines_any_rule_matches(tmp_path: Path) -> None:
    """`--count` is what `grep -c` with the rules' patterns prints: matching lines before
    thresholds (a single overflow skip line counts, though it raises no event)."""
    log = tmp_path / "rank0.log"
    log.write_text("step 1\n"
                   "RuntimeError: NPU out of memory. Tried to allocate 1.00 GiB\n"
                   "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
                   "step 2\n")
    r = scan("--count", str(log))
    assert (r.returncode, r.stdout.strip()) == (1, "2"), r.stderr
    log.write_text("step 1\n")
    r = scan("--count", str(log))
    assert (r.returncode, r.stdout.strip()) == (0, "0"), r.stderr


def test_many_matches_are_streamed_or_counted_not_all_kept(tmp_path):
    """A log with a NaN on every line: --json streams every event (valid JSON), the timeline lists
    the first KEEP_PER_RULE of the rule and counts the rest, --count only counts: what `scan`
    holds does not grow with the number of matches."""
    from tests.helpers import run_cli
    from watchdog.commands.scan import KEEP_PER_RULE

    n = KEEP_PER_RULE + 250
    log = tmp_path / "nan.log"
    log.write_text("".join(f"iteration {i} | loss: nan\n" for i in range(n)))
    out = run_cli("scan", "--json", str(log))
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and len(doc["events"]) == n and doc["first"]["nan"]["line"] == 1
    text = run_cli("scan", str(log)).stdout
    assert f"{n - 3} more nan_loss_value lines" in text and f"{n} events ({KEEP_PER_RULE} listed" in text, text[-400:]
    assert len(text.splitlines()) < 12, text  # one root cause, not hundreds of lines
    assert run_cli("scan", "--count", str(log)).stdout.strip() == str(n)


def test_a_fifo_is_refused_as_not_a_regular_file(tmp_path):
    import os

    from tests.helpers import run_cli

    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    out = run_cli("scan", str(fifo))
    assert out.returncode == 2 and "not a regular file" in out.stderr, out.stderr

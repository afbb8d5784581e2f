"""The fourth round's rules: torch_npu's and CUDA's codes as tables, HCCL's hex errNo read as an
HcclResult, the crash handlers' signal lines, and tracebacks that start behind a prefix or right
after another one. Each case runs on both engines; each kind has a line that must stay silent."""

from __future__ import annotations

from typing import List, Tuple

import pytest

from watchdog.core.verdict import verdict_of_rule
from watchdog.logrules import codes
from watchdog.logrules.extract import Extractor, RawEvent, StreamState
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import build_ruleset

ENGINES = ["re"] + (["re2"] if re2_available() else [])


def _events(text: str, engine: str, chunk_lines: int = 0) -> List[RawEvent]:
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    st = StreamState()
    data = text.encode("utf-8")
    parts = data.splitlines(keepends=True)
    step = chunk_lines or len(parts)
    out: List[RawEvent] = []
    for i in range(0, len(parts), step):
        out += ex.feed(st, b"".join(parts[i:i + step]), None)
    if st.tb is not None:  # as `scan` closes a traceback cut off by the end of the file
        ex._close_tb(st, out, None)
    return out


def _ids(text: str, engine: str) -> List[Tuple[int, str]]:
    return sorted((e.line_no or 0, e.rule.id) for e in _events(text, engine))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule, code", [
    # torch_npu's code table: the category is the code's meaning, not a launcher report
    ("[ERROR] 2025-02-16-12:18:25 (PID:775, Device:0, RankID:-1) ERR01100 OPS call acl api failed",
     "code_torch_npu_device", "ERR01100"),
    ("[rank6]: [ERROR] (PID:360123, Device:6, RankID:6) ERR00006 PTA memory error.", "code_torch_npu_oom", "ERR00006"),
    ("[ERROR] 2024-11-28-11:37:15 (PID:6547, Device:0, RankID:-1) ERR01007 OPS feature not supported",
     "code_torch_npu_traceback", "ERR01007"),
    ("[ERROR] 2025-01-02-03:04:05 (PID:1, Device:3, RankID:3) ERR02011 DIST timeout error", "code_torch_npu_hccl", "ERR02011"),
    # CUDA's runtime codes in THC's numbering
    ("RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered at THCCachingHostAllocator.cpp:265",
     "code_cuda_device", "39"),
    ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510",
     "code_cuda_oom", "2"),
    # HCCL's errNo: the low 16 bits are the HcclResult (0xB = 11, TCP connect)
    ("[ERROR] HCCL(903,python3.8):2025-07-30-19:36:56.166.988 [a.cc:1] [1][Init][Comm]errNo[0x000000000501000B] x",
     "code_hccl_hccl", "11"),
])
def test_a_vendor_code_of_the_new_tables_is_its_finding(engine: str, line: str, rule: str, code: str) -> None:
    assert [r for _, r in _ids(line + "\n", engine)] == [rule]
    entry = codes.describe(line)
    assert entry is not None and entry.code == code
    assert entry.render("zh") and entry.render("en")


@pytest.mark.parametrize("engine", ENGINES)
def test_codes_outside_the_tables_stay_silent(engine: str) -> None:
    text = ("[ERROR] 2024-11-14-15:58:45 (PID:1, Device:0, RankID:-1) ERR00000 PTA success\n"     # 0: success
            "RuntimeError: cuda runtime error (0) : no error\n"                                   # 0: success
            "[ERROR] HCCL(1,python):2024 [a.cc:1][1][Init]errNo[0x0000000005000000] done\n"       # HCCL_SUCCESS
            "[INFO] HCCL(1,python):2024 [a.cc:1][1][Init]errNo[0x0000000005000004] trace\n"        # not an error line
            "export ERR01100=1 OPS\n")                                                          # no submodule after it
    assert _ids(text, engine) == []
    assert codes.describe("[ERROR] HCCL(1,python):2024 x errNo[0x0000000005000000] done") is None


@pytest.mark.parametrize("engine", ENGINES)
def test_a_device_side_assert_is_the_users_code(engine: str) -> None:
    text = ("../aten/src/ATen/native/cuda/Loss.cu:257: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
            "thread: [4,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
            "THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=58 error=59 : device-side assert triggered\n"
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
    assert _ids(text, engine) == [(1, "device_cuda_assert"), (2, "device_cuda_assert")]
    v = verdict_of_rule("device_cuda_assert", "device")
    assert (v.domain, v.restart) == ("user_code", "no")


@pytest.mark.parametrize("engine", ENGINES)
def test_crash_handlers_name_the_fatal_signal_and_not_a_termination(engine: str) -> None:
    text = ("[HOST:03599] Signal: Segmentation fault (11)\n"
            "[HOST:03599] Signal code: Address not mapped (1)\n"
            "[host:5283 :0:5704] Caught signal 7 (Bus error: nonexistent physical address)\n"
            "[host:1234] Signal: Terminated (15)\n"
            "[host:5283 :0:5704] Caught signal 15 (Terminated: sent by kill)\n"
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
            "已杀死\n")
    assert _ids(text, engine) == [(1, "crash_signal_dump"), (3, "crash_signal_dump"),
                                  (6, "crash_rank_signal_exit"), (7, "launcher_killed")]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chunk", [0, 1, 3])
def test_a_traceback_behind_a_prefix_ends_where_the_next_one_starts(engine: str, chunk: int) -> None:
    # A rank-prefixed traceback whose excerpt lost its last line, then other output and a bare
    # traceback: both are events, each on its own first line; before, the first swallowed the rest.
    text = ("[rank3]: Traceback (most recent call last):\n"
            "[rank3]:   File \"train.py\", line 22, in <module>\n"
            "[rank3]:     main()\n"
            "  File \"/usr/lib/python3/site-packages/torch/distributed/launcher/api.py\", line 317\n"
            "INFO: starting the next run\n"
            "Traceback (most recent call last):\n"
            "  File \"temp_1.py\", line 4, in <module>\n"
            "Traceback (most recent call last):\n"
            "  File \"b.py\", line 1, in <module>\n"
            "RuntimeError: second\n")
    got = [(e.line_no, e.rule.id, e.text) for e in _events(text, engine, chunk) if e.rule.id == "python_traceback"]
    assert [(n, r) for n, r, _ in got] == [(1, "python_traceback"), (6, "python_traceback"), (8, "python_traceback")]
    assert got[-1][2] == "RuntimeError: second"


@pytest.mark.parametrize("engine", ENGINES)
def test_loss_wordings_and_the_dllogger_scale(engine: str) -> None:
    text = ("Epoch: [3][24290/24290] Time 2.466 (2.269)      Data 0.041 (0.046)      Loss nan (nan)\n"
            "| E30 iter[ 14/ 15] | [Loss] nan | [step]   464 |\n"
            "Training Summary Epoch: [3]     Average Loss nan\n"
            "[INFO] skip batches whose Loss nan check fails\n"
            "DLL 2020-06-04 00:01:02.123456 - PARAMETER loss_scale : 65536.0\n"
            "DLL 2020-06-04 01:09:11.565880 - PARAMETER loss_scale : 1.4210854715202004e-14\n")
    assert _ids(text, engine) == [(1, "nan_loss_value"), (2, "nan_loss_value"), (3, "nan_loss_value"),
                                  (6, "fp16_loss_scale_collapse")]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_ray_prefixed_traceback_is_one_event_with_its_summary(engine: str) -> None:
    text = ("(TaskRunner pid=30188) Traceback (most recent call last):\n"
            "(TaskRunner pid=30188)   File \"main_ppo.py\", line 12, in run\n"
            "(pid=904548) INFO: another actor's output in between\n"
            "(TaskRunner pid=30188) RuntimeError: HCCL function error: hcclCommInitRootInfoConfig, error code is 4\n")
    tbs = [e for e in _events(text, engine) if e.rule.id == "python_traceback"]
    assert [(e.line_no, e.text) for e in tbs] == [
        (1, "RuntimeError: HCCL function error: hcclCommInitRootInfoConfig, error code is 4")]

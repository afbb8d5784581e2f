"""The seventh round's wordings: the CUDA runtime's own error texts read as its code table's
entries where frameworks print them without a number, and the launchers', collectives' and
serving engines' failure lines the sixth blind set missed. Each case runs on both engines; each
kind has lines that look alike and must stay silent."""

from __future__ import annotations

from typing import List

import pytest

from watchdog.core.verdict import verdict_of_rule
from watchdog.logrules import codes
from watchdog.logrules.extract import Extractor, StreamState
from watchdog.logrules.matcher import Matcher, re2_available
from watchdog.logrules.model import build_ruleset

ENGINES = ["re"] + (["re2"] if re2_available() else [])


def _rules(line: str, engine: str) -> List[str]:
    ex = Extractor(Matcher(build_ruleset(), engine=engine))
    return sorted({e.rule.id for e in ex.feed(StreamState(), (line + "\n").encode("utf-8"), None)})


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule, code", [
    ("RuntimeError: CUDA error: invalid argument", "code_cuda_device", "11"),
    ("RuntimeError: CUDA error: misaligned address", "code_cuda_device", "74"),
    ("RuntimeError: HIP error: no kernel image is available for execution on the device", "code_cuda_device", "48"),
    ("RuntimeError: CUDA driver error: device not ready", "code_cuda_device", "34"),
    ("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered", "code_cuda_device", "77"),
    ("cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorNoDevice: no CUDA-capable device is detected",
     "code_cuda_device", "38"),
    # the longer text wins over its prefix (`unspecified launch failure`)
    ("CUDA error: unspecified launch failure in prior launch", "code_cuda_device", "5"),
])
def test_the_cuda_runtimes_printed_text_is_its_code(engine: str, line: str, rule: str, code: str) -> None:
    """The line is a device finding (the code's rule, or a device-pack rule that names the same fault
    first: the code rule yields to it) and the message names the code and its meaning."""
    category = {r.id: r.category for r in build_ruleset()}
    assert rule in _rules(line, engine) or {category[r] for r in _rules(line, engine)} == {category[rule]}
    entry = codes.describe(line)
    assert entry is not None and (entry.table, entry.code) == ("cuda", code)
    assert entry.render("en") and entry.render("zh")


def test_every_cuda_code_with_a_text_is_read_from_it() -> None:
    """Each printed text names its own code back (no text shadows another's longer one)."""
    table = codes.load_table("cuda")
    assert len(table.printed) >= 70
    for code, text in table.printed:
        entry = codes.describe(f"RuntimeError: CUDA error: {text}")
        assert entry is not None and entry.code == code, (code, text, entry)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    "CUDA error: invalid argumentation in the docs",       # the text goes on: not the runtime's
    "CUDA error: misaligned addresses are handled by the copy kernel",
    "if the error says CUDA error: then check the driver",  # no known text after the marker
    "node-1:1:2 [0] include/alloc.h:102 NCCL WARN Cuda failure 1 'invalid argument'",  # NCCL's: the hccl pack's
])
def test_a_cuda_text_in_other_words_is_no_code(engine: str, line: str) -> None:
    assert not any(r.startswith("code_cuda") for r in _rules(line, engine)), line


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule", [
    ("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR", "device_cuda_error"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`", "device_cuda_error"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "oom_cuda"),
    ("RuntimeError: No CUDA GPUs are available", "device_cuda_error"),
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver",
     "device_cuda_error"),
    ("RuntimeError: The Inner error is reported as above. The process exits for this inner error, and the current "
     "working operator name is SelfAttentionOperation.", "device_cann_inner_error"),
    ("RuntimeError: Sync stream failed:Ascend_0", "device_task_run_failed"),
    ("ValueError: Free memory on device (8.0/64.0 GiB) on startup is less than desired GPU memory utilization "
     "(0.9, 57.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.", "oom_cuda"),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "oom_cuda"),
    ("Exception in device=TPU:6: RESOURCE_EXHAUSTED: From /job:localservice/replica:0/task:0:", "oom_xla"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 7, for key: "
     "store_based_barrier_key:32 (world_size=8, worker_count=4, timeout=0:00:30)", "hccl_rendezvous_failed"),
    ("RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure was: NCCL error",
     "hccl_peer_connection_lost"),
    ("[E ProcessGroupGloo.cpp:138] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
     "no error", "hccl_peer_connection_lost"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:4567",
     "hccl_peer_connection_lost"),
    ("srun: error: gpu-node-12: task 0: Killed", "launcher_killed"),
    ("zsh: killed     python train.py", "launcher_killed"),
    ("Segmentation fault", "crash_shell_signal"),
    ("zsh: segmentation fault (core dumped)  python train.py", "crash_shell_signal"),
])
def test_the_seventh_rounds_wordings_are_reported(engine: str, line: str, rule: str) -> None:
    assert rule in _rules(line, engine)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    "WARNING: No CUDA GPUs are available, running on the CPU",            # a fallback, not a failure
    "cuDNN version 8.9 supports CUDNN_STATUS_INTERNAL_ERROR reporting",    # no `error:` marker
    "Sync stream failed count: 0",                                         # a counter, no device named
    "INFO  Free memory on device before loading weights: 60.1 GiB",        # vLLM's own report
    "setting --mem-fraction-static 0.85 (Not enough memory for cuda graphs is reported otherwise)",
    "INFO store based barrier key set; all 8 workers joined",
    "Gloo connectFullMesh done in 0.4 s",
    "srun: error: gpu-node-12: task 0: Exited with exit code 0",
    "Segmentation fault handler installed",                                # not the shell's report
    "  zsh: completion for torchrun loaded",
])
def test_their_look_alikes_stay_silent(engine: str, line: str) -> None:
    assert _rules(line, engine) == [] or _rules(line, engine) == ["launcher_exit_report"] and "Exited" in line, line


def test_the_new_wordings_carry_a_verdict() -> None:
    """The page says whether a restart helps: the rules' verdicts are known, not `unknown`."""
    for rid, category in (("hccl_peer_connection_lost", "hccl"), ("oom_cuda", "oom"), ("code_cuda_device", "device")):
        assert verdict_of_rule(rid, category).domain != "unknown", rid

"""The tenth round's wordings, read from the vendors' own texts where the twelfth blind set showed a
kind missing: Kubernetes' container state (OOMKilled, exit codes), TensorFlow's RESOURCE_EXHAUSTED
root errors, vLLM's dead-engine reports, the CUDA table's PaddlePaddle glog check, the acl table's
graph-engine lines, CANN's internal-error range of the modules numbered by a digit, the Vision SDK's
ACL return texts and fairseq's loss scale printed as zero. Each case runs on both engines; each kind
has lines that look alike and must stay silent."""

from __future__ import annotations

import pytest

from tests.rule_kit import ENGINES, rules_on


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule", [
    # Kubernetes' container state, as `kubectl describe pod` prints it and as the pod's status holds it
    ("      Reason:       OOMKilled", "oom_container_killed"),
    ('{"terminated":{"exitCode":137,"reason":"OOMKilled","startedAt":"2025-04-29T05:43:32Z"}}', "oom_container_killed"),
    ("      Exit Code:    137", "launcher_killed"),
    ("      Exit Code:    139", "crash_rank_signal_exit"),
    ("      Exit Code:    1", "launcher_exit_report"),
    # TensorFlow's session error of several failed ops of the RESOURCE_EXHAUSTED status
    ("ResourceExhaustedError: 2 root error(s) found.", "oom_cuda"),
    # vLLM's API server when its engine died
    ("ERROR 01-22 00:13:32 client.py:282] RuntimeError('Engine process (pid 77) died.')", "launcher_failure_report"),
    ("CRITICAL 01-22 00:13:36 launcher.py:99] MQLLMEngine is already dead, terminating server process",
     "launcher_failure_report"),
    # the CUDA runtime's code in PaddlePaddle's glog check, its text after `Cuda Error:`
    ("F0426 17:52:54.043815 30811 hl_cuda_device.cc:565] Check failed: cudaSuccess == cudaStat (0 vs. 39) Cuda Error: "
     "uncorrectable ECC error encountered", "code_cuda_device"),
    ("Check failed: cudaSuccess == cudaStat (0 vs. 2) ", "code_cuda_oom"),
    # the graph engine's own error line and AscendCL's report of the op it ran
    ("[ERROR] GE(1160425,python):2023-07-14-15:51:00.409.864 [single_op.cc:331]1160425 ValidateArgs: ErrorNo: "
     "145000(Parameter invalid.) [FINAL][FINAL][Check][Param:outputs]Output size mismatch.", "code_acl_device"),
    ("[ERROR] ASCENDCL(1160425,python):2023-07-14-15:51:00.410.515 [op_executor.cpp:192]1160425 DoExecuteAsync: "
     "[FINAL][FINAL][Exec][Op]Execute op failed. ge result = 145000", "code_acl_device"),
    # a digit module's internal error (CANN's 9000-9999 range)
    ("E69999: [PID: 301341] 2025-07-08-19:23:04.799.485 op[QuantBatchMatmulV3], this platform only support output "
     "transpose_x1 false and transpose_x2 true, actual [false, false][FUNC:AnalyzeAttrs]", "device_cann_inner_error"),
    ("ERROR 07-08 19:23:04 [engine.py:458] E19999: Inner Error!", "device_cann_inner_error"),
    # the Vision SDK's (MindX) ACL return texts; its memory allocation code is an OOM
    ('E20241122 10:02:57.047970 281462569663328 ImageProcessorDptr.hpp:819] Failed to recognize Ascend chip. '
     '(Code = -1, Message = "ACL: general failure")', "device_mindx_acl_error"),
    ("RuntimeError: [-1][ACL: general failure]", "device_mindx_acl_error"),
    ("RuntimeError: [3][ACL: runtime failure]", "device_mindx_acl_error"),
    ('E1122 10:02:57.0 Model.cpp:10] Malloc failed. (Code = 2, Message = "ACL: memory allocation fail")',
     "oom_cann_memory_alloc"),
    # Open MPI's rank that ended without MPI_Finalize
    ("mpirun has exited due to process rank 1 with PID 4017 on", "launcher_exit_report"),
    # fairseq's progress line with the loss scale at its minimum, printed as zero
    ("| epoch 028 | loss 3.976 | nll_loss 2.204 | ppl 4.61 | wps 279460 | ups 3 | wpb 110529.673 | bsz 3780.211 | "
     "num_updates 9165 | lr 0.000330319 | gnorm 0.635 | clip 0.000 | oom 0.000 | loss_scale 0.000 | wall 4043 | "
     "train_wall 3606", "loss_scale_at_minimum"),
])
def test_the_rounds_wordings(engine: str, line: str, rule: object) -> None:
    fired = rules_on(line, engine)
    assert rule in fired, fired


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    # a container that ended well, or for another reason; prose about the reason
    "      Reason:       Completed",
    "      Reason:       Error",
    "      Exit Code:    0",
    "Exit Code: 137 is what a pod shows after the OOM killer or a SIGKILL from the kubelet",
    "The pod was OOMKilled yesterday, so we raised the memory limit to 64Gi and it has run since.",
    # vLLM starting and stopping its loops
    "INFO 12-17 09:16:13 [async_llm.py:480] AsyncLLM output_handler started.",
    # V1's output loop ending, also on a clean stop by SIGTERM (vllm-project/vllm#48745)
    "ERROR 05-02 10:01:12 [async_llm.py:704] AsyncLLM output_handler failed.",
    "INFO 01-22 00:13:36 launcher.py:99] Shutting down FastAPI HTTP server.",
    # a glog check that held, and a GE line without a failure
    "Check failed: cudaSuccess == cudaStat (0 vs. 0) ",
    "[INFO] GE(1160425,python):2023-07-14-15:51:00.409.864 [single_op.cc:331]1160425 ValidateArgs: ErrorNo: 0(Success)",
    # a digit module's user-class code and a warning of the internal range
    "W69999: [PID: 301341] 2025-07-08-19:23:04.799.485 op[QuantBatchMatmulV3] falls back to the slow path",
    # Open MPI's shutdown race after every rank finished (`PID 0`)
    "15:50:32   mpirun has exited due to process rank 1 with PID 0 on",
    # the Vision SDK's success, fairseq's healthy scale
    'I20241122 10:02:56.600000 281462569663328 ModelInferenceProcessor.cpp:120] Init model succeeded. (Code = 0, Message = "Success")',
    "| epoch 028 | loss 3.976 | nll_loss 2.204 | ppl 4.61 | gnorm 0.635 | clip 0.000 | oom 0.000 | loss_scale 128.000 | wall 4043",
])
def test_their_look_alikes_stay_silent(engine: str, line: str) -> None:
    assert not rules_on(line, engine), line


@pytest.mark.parametrize("engine", ENGINES)
def test_root_errors_of_another_status_are_no_oom(engine: str) -> None:
    """TensorFlow's header for several failed ops of another status is an exception (the generic
    traceback evidence), not an OOM."""
    assert rules_on("InvalidArgumentError: 2 root error(s) found.", engine) == ["traceback_generic"]

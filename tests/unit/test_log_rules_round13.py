"""The thirteenth round's wordings, read where the seventeenth blind set showed a kind missing: AMD's
kernel driver when the GPU's command processor, scheduler firmware or power firmware stopped answering,
the device management library missing, shells in a Chinese locale and bash's job report with two
spaces, an IDE's signal report without its space, PaddlePaddle's own signal handler, Horovod's
shut-down in its other words, TensorFlow's `check_numerics`, Keras' stop after a progress bar,
torch.multiprocessing's spawn reports and MindSpore Serving's; then, the eleventh set read, vLLM's
SIGQUIT handler, vllm-ascend's allocator code, torch_npu's description after vLLM's logger, NVIDIA's
driver in three more sentences and Ray Jobs' failed job. Each case runs on both engines; each kind has
lines that look alike and must stay silent."""

from __future__ import annotations

import pytest

from tests.rule_kit import ENGINES, rules_on


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule", [
    # AMD: the command processor, the scheduler firmware (MES), KFD, the power firmware, a reset that lost memory
    ("kvě 25 19:29:57 bc250 kernel: amdgpu 0000:01:00.0: qcm fence wait loop timeout expired", "device_cuda_error"),
    ("Oct 07 15:47:47 sanori-laptop kernel: amdgpu: The cp might be in an unrecoverable state due to an unsuccessful "
     "queues preemption", "device_cuda_error"),
    ("kvě 25 19:29:58 bc250 kernel: amdgpu 0000:01:00.0: timeout waiting for kiq fence", "device_cuda_error"),
    ("[  950.818171] amdgpu 0000:c5:00.0: amdgpu: failed to remove hardware queue from MES, doorbell=0x1802",
     "device_cuda_error"),
    ("[  950.818174] amdgpu 0000:c5:00.0: amdgpu: MES might be in unrecoverable state, issue a GPU reset",
     "device_cuda_error"),
    ("Aug 08 16:12:02 ultrabook-jaap kernel: amdgpu: Failed to quiesce KFD", "device_cuda_error"),
    ("[31317.644104] amdgpu 0000:0d:00.0: amdgpu: SMU: I'm not done with your previous command: "
     "SMN_C2PMSG_66:0x00000012 SMN_C2PMSG_82:0x00000005", "device_cuda_error"),
    ("Jul 24 12:26:19 macross kernel: [drm] VRAM is lost due to GPU reset!", "device_cuda_error"),
    ("Sep 21 01:25:14 merak kernel: [drm ERROR :gfx_v9_0_priv_reg_irq] Illegal register access in command stream",
     "device_cuda_error"),
    # the device management library that npu-smi and MindX DL load
    ("Failed to load the libdcmi.so dynamic library. Check the environment configuration dependency.",
     "cann_library_load_failed"),
    # shells: a Chinese locale, bash's job report with two spaces, an IDE without the space
    ("段错误 (核心已转储)", "crash_shell_signal"),
    ("已放弃 (核心已转储)", "crash_shell_signal"),
    ("run.sh: 行 5:  2581 段错误               python train.py", "crash_shell_signal"),
    ("总线错误", "crash_shell_signal"),
    ("run.sh: line 5:  2581 Segmentation fault      ./python-gcc482-paddle/bin/python resnet50.py",
     "crash_shell_signal"),
    ("139 (interrupted by signal 11:SIGSEGV)", "crash_rank_signal_exit"),
    ("W0411 14:10:19.744871    38 init.cc:209] Warning: PaddlePaddle catches a failure signal, it may not work "
     "properly", "crash_signal_dump"),
    # collectives, NaN stops
    ("AbortedError (see above for traceback): Horovod has been shut down. This has been caused by an exception on one "
     "of the ranks", "hccl_generic"),
    ("INFO:tensorflow:Error reported to Coordinator: <class 'tensorflow.python.framework.errors_impl."
     "InvalidArgumentError'>, LossTensor is inf or nan. : Tensor had NaN values", "nan_anomaly_detected"),
    ("  3/234 [..............................] - ETA: 33:37:24 - loss: 44.4110Batch 3: Invalid loss, terminating "
     "training", "nan_anomaly_detected"),
    # launchers
    ("torch.multiprocessing.spawn.ProcessRaisedException:", "launcher_failure_report"),
    ("[ERROR] SERVING(658:281473174196640,MainProcess):2024-05-31-07:57:07.148.026 [mindspore_serving/server/"
     "_server.py:235] Fail to start workers because of death of one worker", "launcher_failure_report"),
    ("Jul 13 21:22:34 Process 2 terminated with exit code 10, terminating remaining processes.", "launcher_exit_report"),
    ("Jul 13 21:22:34  exiting process 3 with exit code: 10", "launcher_exit_report"),
    # second wordings (the eleventh set read): vLLM's SIGQUIT handler, Ray Jobs' CLI
    ("[2026-07-07 07:20:43] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
     "launcher_failure_report"),
    ("Job 'raysubmit_7wNNGHdVi92R8wt2' failed", "launcher_exit_report"),
    # vllm-ascend's allocator code; torch_npu's description after vLLM's logger and after an exception's name
    ("acl Error, code: 207001 at /__w/vllm-ascend/vllm-ascend/csrc/camem_allocator.cpp:63", "code_acl_oom"),
    ("(EngineCore_DP0 pid=3132) ERROR 10-15 16:32:16 [core.py:708] [Error]: System Direct Memory Access (DMA) "
     "hardware execution error.", "code_acl_device"),
    ("Error: [Error]: An internal error occurs in the Driver module.", "code_acl_device"),
    # NVIDIA's driver: off the bus in its other sentence, versions that differ, the GSP's heartbeat
    ("[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "device_cuda_error"),
    ("NVRM: API mismatch: client version 570.133.07, kernel module version 570.124.06", "device_cuda_error"),
    ("NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out", "device_generic"),
])
def test_the_rounds_wordings(engine: str, line: str, rule: object) -> None:
    fired = rules_on(line, engine)
    assert rule in fired, fired


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    # the reset alone and the eviction that echo a fault reported before them; a reset that kept memory
    "[Thu Sep 10 14:36:18 2026] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
    "[  950.818179] amdgpu 0000:c5:00.0: amdgpu: Failed to evict process queues",
    "[drm] VRAM is not lost after GPU reset",
    "amdgpu 0000:0d:00.0: amdgpu: SMU is initialized successfully!",
    # the library loaded; a Chinese shell's job that ended well
    "Loaded the libdcmi.so dynamic library.",
    "[1]+  已完成               python train.py",
    # an IDE's clean end and a non-fatal signal
    "Process finished with exit code 0",
    "130 (interrupted by signal 2:SIGINT)",
    # the op's definition names check_numerics' message; Keras' loss printed fine
    '\t [[Node: CheckNumerics = CheckNumerics[T=DT_FLOAT, message="LossTensor is inf or nan.", '
    '_device="/job:localhost/replica:0/task:0/device:CPU:0"](total_loss)]]',
    "  3/234 [..............................] - ETA: 33:37:24 - loss: 44.4110",
    # a traceback's source line; spawn's clean ends
    "    raise ProcessRaisedException(msg, error_index, failed_process.pid)",
    '    raise RuntimeError("Fail to start workers because of death of one worker")',
    "Process 2 terminated with exit code 0",
    "exiting process 3 with exit code: 0",
    # Ray's job that succeeded and its memory monitor's summary (the killed task is retried); another tool's
    # `[Error]:` sentence; Hydra's header over a traceback that is read
    "Job 'raysubmit_7wNNGHdVi92R8wt2' succeeded",
    "(raylet) node_manager.cc:3277: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed",
    "x.sh [Error]: Invalid device.",
    "Error executing job with overrides: ['run.iterations=10']",
    "SIGQUIT received; reloading",
])
def test_their_look_alikes_stay_silent(engine: str, line: str) -> None:
    assert not rules_on(line, engine), line

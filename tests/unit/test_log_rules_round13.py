"""The thirteenth round's wordings, read where the seventeenth blind set showed a kind missing: AMD's
kernel driver when the GPU's command processor, scheduler firmware or power firmware stopped answering,
the device management library missing, shells in a Chinese locale and bash's job report with two
spaces, an IDE's signal report without its space, PaddlePaddle's own signal handler, Horovod's
shut-down in its other words, TensorFlow's `check_numerics`, Keras' stop after a progress bar,
torch.multiprocessing's spawn reports and MindSpore Serving's; then, the eleventh set read, vLLM's
SIGQUIT handler, vllm-ascend's allocator code, torch_npu's description after vLLM's logger, NVIDIA's
driver in three more sentences and Ray Jobs' failed job; then, the eighteenth and nineteenth sets read
after their scores, the third wordings (NVIDIA's version checks, THC's and Kaldi's device faults, MIOpen,
the CANN libraries not found, glibc's assert, launchers and services, Open MPI's misuse abort, the
Ascend driver's physical allocation, vLLM's negative KV cache, BasicSR's losses). Each case runs on both
engines; each kind has lines that look alike and must stay silent."""

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
    # bash 5.2's own zh_CN texts: a full-width colon and full-width parentheses
    ("/tmp/seg.sh: 第 3 行：31557 段错误               sleep 30", "crash_shell_signal"),
    ("seg2.sh: 第 2 行：31563 段错误               （核心已转储）sh -c 'kill -SEGV $$'", "crash_shell_signal"),
    ("总线错误", "crash_shell_signal"),
    ("run.sh: line 5:  2581 Segmentation fault      ./python-gcc482-paddle/bin/python resnet50.py",
     "crash_shell_signal"),
    ("139 (interrupted by signal 11:SIGSEGV)", "crash_rank_signal_exit"),
    # collectives, NaN stops
    ("AbortedError (see above for traceback): Horovod has been shut down. This has been caused by an exception on one "
     "of the ranks", "hccl_generic"),
    ("INFO:tensorflow:Error reported to Coordinator: <class 'tensorflow.python.framework.errors_impl."
     "InvalidArgumentError'>, LossTensor is inf or nan. : Tensor had NaN values", "nan_anomaly_detected"),
    ("  (0) Invalid argument: Loss : Tensor had Inf and NaN values", "nan_anomaly_detected"),
    ("InvalidArgumentError: grads : Tensor had -Inf, +Inf, and NaN values", "nan_anomaly_detected"),
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
    ("Job 'my-train-job-01' failed", "launcher_exit_report"),
    # vllm-ascend's allocator code; torch_npu's description after vLLM's logger and after an exception's name
    ("acl Error, code: 207001 at /__w/vllm-ascend/vllm-ascend/csrc/camem_allocator.cpp:63", "code_acl_oom"),
    ("(EngineCore_DP0 pid=3132) ERROR 10-15 16:32:16 [core.py:708] [Error]: System Direct Memory Access (DMA) "
     "hardware execution error.", "code_acl_device"),
    ("Error: [Error]: An internal error occurs in the Driver module.", "code_acl_device"),
    # NVIDIA's driver: off the bus in its other sentence, versions that differ, the GSP's heartbeat
    ("[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "device_cuda_error"),
    ("NVRM: API mismatch: client version 570.133.07, kernel module version 570.124.06", "device_cuda_error"),
    ("NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out", "device_generic"),
    # third wordings (the eighteenth and nineteenth sets read after their scores): NVIDIA's versions and old checks
    ("f11n13:3580085:3580108 [0] misc/nvmlwrap.cc:98 NCCL WARN nvmlInit_v2() failed: Driver/library version mismatch",
     "device_cuda_error"),
    ("nvidia-container-cli: detection error: nvml error: unknown error: unknown", "device_cuda_error"),
    ("nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared object "
     "file: no such file or directory: unknown", "device_cuda_error"),
    ("Unable to determine the device handle for GPU1: 0000:02:00.0: Unknown Error", "device_cuda_error"),
    ("    THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=278 error=700 : an illegal "
     "memory access was encountered", "device_cuda_error"),
    ('ERROR (nnet3-train[5.4]:CopyToVec():cu-vector.cc:899) cudaError_t 4 : "unspecified launch failure" returned '
     "from 'cudaMemcpy(dst->Data(), this->data_, sizeof(Real) * dim_, cudaMemcpyDeviceToHost)'", "device_cuda_error"),
    # the runtime's reason in words, MIOpen, a CANN library not found
    ("        rtStreamSynchronizeWithTimeout execution failed, reason=the model stream execute failed"
     "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:50]", "device_generic"),
    ("MIOpen Error: /MIOpen/src/hipoc/hipoc_program.cpp:286: Code object build failed. Source: MIOpenIm2d2Col.cl",
     "device_generic"),
    ("ImportError: libhccl.so: cannot open shared object file: No such file or directory", "cann_library_load_failed"),
    # native aborts: glibc's assert, a swallowed cancellation, strace's fatal signal
    ("train_gpt2cu: llmc/dataloader.h:186: void dataloader_init(DataLoader*, const char*, size_t, size_t, int, int, "
     "int): Assertion `shard_ntok >= (int64_t) (num_processes * B * T + 1)' failed.", "crash_signal_dump"),
    ("FATAL: exception not rethrown", "crash_signal_dump"),
    ("+++ killed by SIGSEGV (core dumped) +++", "crash_signal_dump"),
    ("[pid  4242] +++ killed by SIGABRT +++", "crash_signal_dump"),
    # launchers and services
    ("terminate called recursively", "cpp_terminate"),
    ("run_script_path FAILED", "launcher_exit_report"),
    ("[Modelarts Service Log]Training end with return code: 1", "launcher_exit_report"),
    ("[Modelarts Service Log]Training end with return code: 137", "launcher_killed"),
    ("[Modelarts Service Log]Training end with return code: 139", "crash_rank_signal_exit"),
    ("run.pl: 3 / 4 failed, log is in exp/tri1/log/align.*.log", "launcher_exit_report"),
    ("queue.pl: job failed with status 1, log is in exp/tri1/log/align.1.log", "launcher_exit_report"),
    ("utils/retry.pl: job failed 2 times; log is in exp/chain/tdnn_1a_sp/log/train.0.1.log", "launcher_exit_report"),
    ("ERROR 08-20 09:50:58 [multiproc_executor.py:298] Rank 0 scheduler is dead. Please check if there are relevant "
     "logs.", "launcher_failure_report"),
    # collectives: Open MPI's misuse abort, UCX's PML, HCCL's op-retry connection
    ("*** The MPI_Comm_rank() function was called before MPI_INIT was invoked.", "hccl_generic"),
    ("pml_ucx.c:175 Error: Failed to receive UCX worker address: Not found (-13)", "hccl_generic"),
    ("[a1:14245] pml_ucx.c:285  Error: Failed to resolve UCX endpoint for rank 3", "hccl_generic"),
    ("[OpRetryConnection][Init] Connect to server failed, serverIp_[90.90.97.29]  serverPort [60000]", "hccl_generic"),
    # memory: the driver's physical allocation, MindSpore's start, vLLM's KV cache, TensorFlow's BFC
    ("[ERROR] DRV(4176881,python3.7):2024-06-29-16:19:28.520.085 [ascend][curpid: 4176881, 4176881][drv][devmm]"
     "[halMemCreate 3073]<errno:12, 6> Mem create failed. (ret=6; size=20971520; side=1; devid=0)", "oom_cann_memory_alloc"),
    ("[ERROR] RUNTIME(4176881,python3.7):2024-06-29-16:19:28.521.874 [npu_driver.cc:5757]4176881 MallocPhysical:"
     "[INIT][DEFAULT][drv api]halMemCreate failed. drvRetCode=6.", "oom_cann_memory_alloc"),
    ("RuntimeError: mindspore/ccsrc/plugin/device/ascend/hal/device/ascend_memory_adapter.cc:47 Initialize] Malloc "
     "device memory failed, free memory size is less than half of total memory size.", "oom_mindspore"),
    ("(Worker_TP0_EP0 pid=280) INFO 09-20 03:22:51 [worker.py:593] Available KV cache memory: -7.21 GiB", "oom_exception"),
    ("W tensorflow/core/common_runtime/bfc_allocator.cc:275] Ran out of memory trying to allocate 24.38MiB.  See logs "
     "for memory state.", "oom_exception"),
    # BasicSR's loss names
    ("2023-06-16 22:22:49,988 INFO: [debug..][epoch: 0, iter: 156, lr:(2.000e-04,2.000e-05,)] [eta: 403 days, 22:44:43, "
     "time (data): 0.482 (0.002)] l_pix: nan", "nan_loss_value"),
    ("2023-06-16 22:22:49,988 INFO: [train..][epoch: 0, iter: 156] l_g_pix: nan", "nan_loss_value"),
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
    # NCCL's optional plugin, a healthy KV cache, TensorFlow's BFC warning that is no failure, BasicSR's healthy loss,
    # ModelArts' clean end, strace showing a child's exit
    "node:14159:14159 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot "
    "open shared object file: No such file or directory",
    "(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [gpu_worker.py:456] Available KV cache memory: 17.36 GiB",
    "W tensorflow/core/common_runtime/bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
    "1.02GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that there could be "
    "performance gains if more memory were available.",
    "2023-06-16 22:22:49,505 INFO: [epoch: 0, iter: 155] l_pix: 1.2345e-02",
    "[Modelarts Service Log]Training end with return code: 0",
    "[pid  4242] --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=4243, si_status=0} ---",
    # the attack pass's: strace showing a signal delivered (a JVM handles SIGSEGV by the hundred), Paddle's banner
    # (glog's handler prints it for a SIGTERM too), UCX without thread support (Open MPI goes on), MPI misuse after
    # the work is done, MIOpen's search logging a candidate that failed, amdgpu's busy power firmware and its
    # eviction of a process already gone, a single Kaldi job that retry.pl reruns
    "--- SIGSEGV {si_signo=SIGSEGV, si_code=SEGV_MAPERR, si_addr=NULL} ---",
    "W1025 23:25:28.207856  1152 init.cc:226] Warning: PaddlePaddle catches a failure signal, it may not work properly",
    "[pge328:67669] ../../../../../openmpi-3.1.2/ompi/mca/pml/ucx/pml_ucx.c:226 Error: UCP worker does not support "
    "MPI_THREAD_MULTIPLE",
    "*** The MPI_Attr_get() function was called after MPI_FINALIZE was invoked.",
    "MIOpen(HIP): Error [EvaluateInvokers] /MIOpen/src/hipoc/hipoc_kernel.cpp:106: Failed to launch kernel: invalid "
    "configuration argument",
    "amdgpu 0000:0b:00.0: amdgpu: SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x00000024 "
    "SMN_C2PMSG_82:0x00000001",
    "amdgpu: Failed to quiesce KFD",
    "run.pl: job failed, log is in exp/chain/tdnn_1a_sp/log/train.0.1.log",
    "[Modelarts Service Log]Training end with return code: 0",
])
def test_their_look_alikes_stay_silent(engine: str, line: str) -> None:
    assert not rules_on(line, engine), line


@pytest.mark.parametrize("engine", ENGINES)
def test_a_device_side_assert_stays_the_device_rules(engine: str) -> None:
    """A CUDA kernel's assert ends with a backtick, glibc's with a quote: the kernel's stays with its own
    rule (device_cuda_assert), never the host crash rule, and a THC check of it is not a device fault."""
    kernel = ("../aten/src/ATen/native/cuda/NLLLoss2d.cu:103: nll_loss2d_forward_kernel: block: [3,0,0], thread: "
              "[930,0,0] Assertion `t >= 0 && t < n_classes` failed.")
    assert rules_on(kernel, engine) == ["device_cuda_assert"]
    thc = ("THCudaCheck FAIL file=/build/pytorch/torch/lib/THC/generic/THCStorage.c line=36 error=59 : device-side "
           "assert triggered")
    assert "device_cuda_error" not in rules_on(thc, engine)

"""The seventh round's wordings: the CUDA runtime's own error texts read as its code table's
entries where frameworks print them without a number, and the launchers', collectives' and
serving engines' failure lines the sixth blind set missed. Each case runs on both engines; each
kind has lines that look alike and must stay silent."""

from __future__ import annotations

import pytest

from tests.rule_kit import ENGINES, rules_on
from watchdog.core.verdict import verdict_of_rule
from watchdog.logrules import codes
from watchdog.logrules.model import build_ruleset


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule, code", [
    ("RuntimeError: CUDA error: invalid argument", "code_cuda_device", "11"),
    ("RuntimeError: CUDA error: misaligned address", "code_cuda_device", "74"),
    ("RuntimeError: HIP error: no kernel image is available for execution on the device", "code_cuda_device", "48"),
    ("RuntimeError: CUDA driver error: invalid device ordinal", "code_cuda_device", "10"),
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
    fired = rules_on(line, engine)
    assert rule in fired or {category[r] for r in fired} == {category[rule]}
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
    assert not any(r.startswith("code_cuda") for r in rules_on(line, engine)), line


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
    ("srun: error: gpu-node-12: task 0: Killed", "launcher_killed"),
    ("zsh: killed     python train.py", "launcher_killed"),
    ("Segmentation fault", "crash_shell_signal"),
    ("zsh: segmentation fault (core dumped)  python train.py", "crash_shell_signal"),
    # the vendors' own texts: glibc's heap and stack checks, systemd-coredump, NVML and ROCm,
    # NCCL's result strings, the c10d store, Open MPI and torch elastic's agent
    ("MemoryError", "oom_exception"),
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 7.45 GiB for an array with shape (1000, 1000)",
     "oom_exception"),
    ("systemd-coredump[2345]: Process 1234 (python) of user 1000 dumped core.", "crash_debugger_or_kernel_report"),
    ("free(): double free detected in tcache 2", "crash_rank_signal_exit"),
    ("munmap_chunk(): invalid pointer", "crash_rank_signal_exit"),
    ("*** stack smashing detected ***: terminated", "crash_rank_signal_exit"),
    ("Process finished with exit code -1073741819 (0xC0000005)", "crash_rank_signal_exit"),
    ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", "crash_rank_signal_exit"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
     "driver is installed and running.", "device_cuda_error"),
    ("Failed to initialize NVML: Driver/library version mismatch", "device_cuda_error"),
    ("Memory access fault by GPU node-2 (Agent handle: 0x55d4c0c1b0a0) on address 0x7f0000000000. Reason: Page not "
     "present or supervisor privilege.", "device_cuda_error"),
    (":0:rocdevice.cpp            :2614: 1234567890 us: 1234: [tid:0x7f] Device::callbackQueue aborting with error : "
     "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address.",
     "device_cuda_error"),
    ("RuntimeError: NCCL Error 3: internal error - please report this issue to the NCCL developers", "hccl_call_failed"),
    ("horovod.common.exceptions.HorovodInternalError: ncclAllReduce failed: unhandled system error", "hccl_call_failed"),
    ("torch.distributed.DistBackendError: [2] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
     "c10d key-value store by key '0', but store->get('0') got error: Socket Timeout", "hccl_rendezvous_failed"),
    ("torch.distributed.DistStoreError: Socket Timeout", "hccl_rendezvous_failed"),
    ("MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD with errorcode 1.", "launcher_exit_report"),
    ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 1234 got signal: 15", "launcher_exit_report"),
    # MindSpore's and the Ascend driver tools' own texts
    ("RuntimeError: Out of Memory!!! total[3212254720] (dynamic[0] memory poll[524288000]) malloc[32611480064] failed!",
     "oom_mindspore"),
    ("RuntimeError: Launch kernel failed, name:Default/Custom-op0", "device_task_run_failed"),
    ("dcmi module initialize failed. ret is -8005", "device_driver_error"),
    ("[ERROR] DISTRIBUTED(1234,ffff,python):2024-01-01-00:00:00.000.000 [meta_server_node.cc:100] UpdateTopoState] "
     "The node: 3 is timed out. It may exit with exception, please check this node's log.", "launcher_exit_report"),
    ("[ERROR] RUNTIME(1234,python):2024-01-01-00:00:00.000.000 [device.cc:100] Open device 0 failed, retCode=0x7020014",
     "device_open_failed"),
    # from the vendors' sources (a list of each project's fatal texts, read in the source)
    ("CANN Inner Error. Please rectify the fault based on the error information in the ascend log.", "device_cann_inner_error"),
    ("Inner error happened with CAN_EXIT status, detail: the model stream execute failed", "device_cann_inner_error"),
    ("rtStreamSynchronize execution failed, reason=device task abort", "device_task_run_failed"),
    ("rtStreamSynchronize execute failed, reason=[stream abort]", "device_task_run_failed"),
    ("rtStreamSynchronize execution failed, reason=device oom", "oom_cann_memory_alloc"),
    ("stream status is stream abort, device_id=0, stream_id=2.", "device_task_run_failed"),
    ("Stream synchronize failed, stream_id=2, timeout=1800000ms.", "device_stream_sync_timeout"),
    ("The error from device(chipId:0, dieId:0), serial number is 12, notify wait timeout occurred during task execution, "
     "stream_id:3, sq_id:3, task_id:100, notify_id=5, timeout=1836s.", "hccl_notify_wait_timeout"),
    ("The error from device(0), serial number is 3, there is an error of aicore error, core id is 12, error code = "
     "0x800000, dump info: pc start: 0x1", "device_exception_dump"),
    ("[DFX_INFO]AI Core kernel execution failed, device_id=0, stream_id=2, report_stream_id=2, task_id=10, flip_num=0",
     "device_aicore_exception"),
    ("fftsplus task execute failed, dev_id=0, stream_id=2, task_id=1, context_id=0, thread_id=0, err_type=1[fftsplus sdma error]",
     "device_task_run_failed"),
    ("HBM Multi Bit Error.", "device_hbm_ecc"),
    ("hns_roce_lite_handle_error_cqe(123) : error cqe status: 0x5", "hccl_roce_cqe_error"),
    ("[Rank 3], found async exception when checking for HCCL errors: HCCL error", "hccl_call_failed"),
    ("[Rank 3] Work WorkHCCL(SeqNum=5, OpType=ALLREDUCE) timed out in blocking wait (TORCH_HCCL_BLOCKING_WAIT=1 or "
     "HCCL_BLOCKING_WAIT=1).", "hccl_collective_watchdog_timeout"),
    ("[Rank 3] HCCL watchdog thread terminated with exception: unknown", "hccl_collective_watchdog_timeout"),
    ("ProcessGroupHCCL's watchdog detected an exception from the local rank. This is most likely caused by incorrect usages",
     "hccl_pg_watchdog_hang"),
    ("[AllocAlgResource]Alloc transports failed, tag[AllReduce_1]", "hccl_init_failed"),
    ("RuntimeError: HCCL error: remote rank error", "hccl_call_failed"),
    ("rtMalloc mem size[1024] fail, ret[207001]", "oom_mindspore"),
    ("Distributed job exited with exception. Please check logs in directory: ./msrun_log.", "launcher_exit_report"),
    ("The total number of timed out node is 2. Timed out node list is: [1, 3], worker 1 is the first one timed out",
     "launcher_exit_report"),
    ("node1:1234:5678 [0] transport/net_ib/p2p.cc:123 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<12345> with "
     "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129", "hccl_call_failed"),
    ("node1:1234:5678 [0] transport/net_socket.cc:88 NCCL WARN NET/Socket : peer 10.0.0.2<45678> message truncated : "
     "receiving 1048576 bytes instead of 65536.", "hccl_call_failed"),
    ("RuntimeError: NCCL timeout in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:123", "hccl_call_failed"),
    ("[node1:01234] *** An error occurred in MPI_Allreduce", "hccl_call_failed"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv "
     "operation to complete", "hccl_socket_timeout"),
    ("ORTE has lost communication with a remote daemon.", "hccl_peer_connection_lost"),
    ("RuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices.", "device_cuda_error"),
    ("RuntimeError: DataLoader worker (pid 1234) exited unexpectedly with exit code 1. Details are lost due to "
     "multiprocessing.", "crash_rank_signal_exit"),
    ("RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited unexpectedly", "crash_rank_signal_exit"),
    ("slurmstepd: error: *** JOB 1234 ON node1 FAILED (non-zero exit code or other failure mode) ***", "launcher_exit_report"),
    ("RuntimeError: No executable batch size found, reached zero.", "oom_exception"),
    ("FloatingPointError: invalid value (nan) encountered in jit(train_step)", "nan_anomaly_detected"),
    # the C library's and C++'s words for memory refused
    ("OSError: [Errno 12] Cannot allocate memory", "oom_host_allocator"),
    ("RuntimeError: unable to mmap 1024 bytes from file </torch_1234_5678_0>: Cannot allocate memory (12)",
     "oom_host_allocator"),
    ("bash: fork: Cannot allocate memory", "oom_host_allocator"),
    ("  what():  std::bad_alloc", "oom_host_allocator"),
    ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV "
     "cache (12345). Try increasing `gpu_memory_utilization`", "oom_exception"),
])
def test_the_seventh_rounds_wordings_are_reported(engine: str, line: str, rule: str) -> None:
    assert rule in rules_on(line, engine)


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
    "MemoryError handling: retrying with a smaller batch",               # not the exception line
    "    except MemoryError:",
    "  Failed to initialize NVML: Unknown Error (falling back to the CUDA runtime)",  # a library's own warning, indented
    "NCCL Error codes are listed in nccl.h",
    "DistStoreError is raised when the store times out",
    "munmap_chunk() is glibc's helper for large blocks",
    "INFO The node: 3 is registered. Total nodes: 8",
    "Launch kernel failed count: 0",
    "Cannot allocate memory for the cache? no: 64 GiB free",                # no errno, no fork, no mmap
    "max_model_len 32768 fits: 40960 tokens can be stored in KV cache",
    # repeats of what the line before them reports (a curated set marks them ordinary lines)
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "WARNING:absl:Unable to initialize backend 'tpu_driver': NOT_FOUND: Unable to find driver in registry",
    # the second attack pass's finds: a requeue the job asked for, a user's scancel, a handled fallback, a retried task
    "slurmstepd: error: *** JOB 31182239 ON sh-06-34 CANCELLED AT 2018-11-05T10:35:06 DUE TO JOB REQUEUE ***",
    "[2026-08-06T13:34:26.758] error: *** STEP 1234 ON node001 CANCELLED AT 2026-08-06T13:34:26 DUE to SIGNAL Terminated ***",
    "ERROR 06-16 12:49:24 [pyhccl_wrapper.py:186] Failed to load HCCL library. so_file=/not/exist/path/libhccl.so, error=x",
    "The worker died unexpectedly while executing this task. Check python-core-worker-*.log files for more information.",
    "slurmstepd: error: *** STEP 1234.3 ON node1 FAILED (non-zero exit code or other failure mode) ***",
    # the attack pass's finds: real lines of runs that went on or ended well
    "2021-08-30 02:23:56.777063: I tensorflow/stream_executor/cuda/cuda_driver.cc:775] failed to allocate 256.00M "
    "(268435456 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",   # TF retries smaller
    "2023-10-15 01:44:09.073610: E tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:268] failed call to "
    "cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",           # a CPU-only step
    "/home/u/envs/a/lib/python3.8/site-packages/torch/autograd/__init__.py:130: UserWarning: CUDA initialization: Found "
    "no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver",
    "CudaWarning: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver",
    "python3.10/site-packages/torch/cuda/__init__.py:141: UserWarning: CUDA initialization: Unexpected error from "
    "cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices()",
    "            what():  CUDA error: driver shutting down",                       # at exit, work saved
    "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD with errorcode 0.",   # a planned end
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:4567",
    "torch.distributed.DistStoreError: Connection reset by peer",                 # the store's exit race
    "RuntimeError: Stop_waiting response is expected",
])
def test_their_look_alikes_stay_silent(engine: str, line: str) -> None:
    """Silent; Slurm's exit row of a task (`Exited with exit code 0`) may only be the launcher's
    exit report, which judges the code itself."""
    fired = rules_on(line, engine)
    allowed = {"launcher_exit_report"} if "Exited" in line else set()
    assert set(fired) <= allowed, (line, fired)


def test_the_new_wordings_carry_a_verdict() -> None:
    """The page says whether a restart helps: the rules' verdicts are known, not `unknown`."""
    for rid, category in (("hccl_peer_connection_lost", "hccl"), ("oom_cuda", "oom"), ("code_cuda_device", "device")):
        assert verdict_of_rule(rid, category).domain != "unknown", rid

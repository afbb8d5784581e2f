"""The ninth round's wordings, read from the vendors' own texts where the eighth blind set showed a
kind missing: the launchers' exit reports (MPICH's Hydra box, Open MPI's non-zero exit, Horovod,
torch elastic's failed round, systemd-coredump's first line), PaddlePaddle's allocator, the loss
printed as NaN before the next field, and the generic shapes of CANN's plog modules (HCCL, HCCP,
ROCE, RUNTIME), UCX, XLA's coordination service and NVIDIA's GSP. Each case runs on both engines;
each kind has lines that look alike and must stay silent."""

from __future__ import annotations

import pytest

from tests.rule_kit import ENGINES, rules_on


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule", [
    # MPICH's Hydra box: the exit status decides the kind
    ("=   EXIT CODE: 139", "crash_rank_signal_exit"),
    ("=   EXIT CODE: 11", "crash_rank_signal_exit"),
    ("=   EXIT CODE: 9", "launcher_killed"),
    ("=   EXIT CODE: 137", "launcher_killed"),
    ("=   EXIT CODE: 1", "launcher_exit_report"),
    ("=   EXIT CODE: 255", None),  # beyond 128 + 64: no signal, no plain exit status to read
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault (signal 11)", "crash_rank_signal_exit"),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)", "launcher_killed"),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Terminated (signal 15)", "launcher_exit_report"),
    # Open MPI, Horovod, torch elastic, systemd-coredump
    ("Primary job  terminated normally, but 1 process returned", "launcher_exit_report"),
    ("mpirun detected that one or more processes exited with non-zero status, thus causing", "launcher_exit_report"),
    ("Process 3 exit with status code 134.", "crash_rank_signal_exit"),
    ("INFO:torch.distributed.elastic.agent.server.api:Local worker group finished (FAILED). Waiting 300 seconds "
     "for other agents to finish", "launcher_exit_report"),
    ("Jan 09 18:55:45 host systemd-coredump[134090]: Process 91762 (python) of user 60105 terminated abnormally "
     "with signal 6/ABRT, processing...", "crash_debugger_or_kernel_report"),
    # PaddlePaddle's allocator
    ("Out of memory error on GPU 0. Cannot allocate 3.125000GB memory on GPU 0, available memory is only 117.750000MB.",
     "oom_cuda"),
    ("ResourceExhaustedError: ", "oom_cuda"),
    # a loss printed as NaN before the next field, at a sentence's end; a norm assigned Inf
    ("Epoch: [1/100][2000/2976] Data 0.001 (0.004) Batch 0.911 (0.981) Loss nan Main Loss nan Accuracy 0.2679.",
     "nan_generic"),
    ("21:49:56.101 [main] DEBUG api.keras.Sequential - Batch stat: { lossValue: NaN metricValue: 0.082 }", "nan_generic"),
    ("Training batch 64 ends with loss NaN.", "nan_generic"),
    ("    grad_norm_before_clip = Inf", "nan_generic"),
    ("exception: current loss scale already at minimum - cannot decrease scale anymore. exiting run",
     "loss_scale_at_minimum"),
    # CANN plog modules at the ERROR level, UCX, XLA's coordination service, NVIDIA's GSP
    ("[ERROR] HCCL(17528,python3):2026-03-18-10:33:52.114.027 [transport_manager.cc:1252] [18744][CreateLink]"
     "[InitChannelStage][Timeout]SetMachinePara error.", "hccl_generic"),
    ("[ERROR] HCCP(2040034,alltoall_test):2025-09-15-08:38:12.776.650 [ra_hdc_lite.c:794]tid:2040458,"
     "ra_hdc_lite_period_poll_cqe : [create][ra_hdc_period_poll]failed CQE status[12], wr[0]", "hccl_generic"),
    ("[1506866470.744722] [host-065:1411 :0]     ucp_worker.c:373  UCX  ERROR Error Endpoint timeout was not "
     "handled for ep 0x9ce460", "hccl_generic"),
    ("E external/xla/xla/tsl/distributed_runtime/coordination/coordination_service.cc:1170] /job:jax_worker/"
     "replica:0/task:0 has been set to ERROR in coordination service: UNAVAILABLE: Task heartbeat timed out",
     "hccl_generic"),
    ("[   24.302465] NVRM: GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 812751949", "device_generic"),
    ("[ERROR] RUNTIME(57096,python3.10):2025-05-12-20:55:44.705.031 [task_info.cc:1270]57288 "
     "TaskFailCallBackForFftsPlusTask:fftsplus streamId=50, taskId=21, [fftsplus task exception]", "device_generic"),
    ("        rtDeviceSynchronizeWithTimeout execute failed, reason=[sdma copy error][FUNC:FuncErrorReason]",
     "device_generic"),
    ("Cuda failure 802 'system not yet initialized'", "device_generic"),
    ("torch.distributed.elastic.agent.server.api:Local worker group finished (WorkerState.FAILED). Waiting 300 seconds",
     "launcher_exit_report"),
    # the exception with the Windows store's words still pages (only the warning is silent)
    ("torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of "
     "(DESKTOP-X, 29500). The client socket has failed to connect to [DESKTOP-X]:29500 (system error: 10049 - "
     "The requested address is not valid in its context.).", "hccl_rendezvous_failed"),
    # after the ninth set's score: ggml's assertion, NVML's lost GPU, HCCL's FFTS+ timeout, Ray Jobs and submitit,
    # an exception carrying its cause's class
    ("/src/llama.cpp/ggml/src/ggml-cann/aclnn_ops.cpp:3007: GGML_ASSERT(n_dims == src0->ne[0]) failed",
     "crash_rank_signal_exit"),
    ("slurmstepd: error: NVML: Failed to get usage(15): GPU is lost", "device_cuda_error"),
    ("hccl fftsplus task timeout occurred during task execution, stream_id:3, task_id:12", "hccl_notify_wait_timeout"),
    ("Status message: Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):",
     "launcher_exit_report"),
    ("submitit ERROR (2021-03-15 18:45:40,210) - Submitted job triggered an exception", "launcher_exit_report"),
    ("ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_update_actor() (pid=4926, ip=10.0.0.2)",
     "traceback_generic"),
    ("exception of fftsplus aivector error, core id is 0, error code = 0x4000000000000000", "device_aicore_exception"),
    ("Segmentation fault(core dumped)", "crash_shell_signal"),
    # after the tenth set's score: signal handlers, user-space OOM killers, launchers' silent aborts, codes in
    # the runtime's API errors, plog lines without a space, the NPU's silent-data-corruption checks
    ("SIGABRT(6), PID: 2450054, Thread 2450055:", "crash_signal_dump"),
    ("SIGABRT Signal (Abort Signal from abort) catched, backtrace info:", "crash_signal_dump"),
    ("    crash reason: SIGABRT", "crash_signal_dump"),
    ("12月 17 10:04:41 user systemd-oomd[588]: Killed /user.slice/user-1000.slice/app.slice/vte-spawn-f65.scope "
     "due to memory pressure for /user.slice/user-1000.slice", "oom_host_oom_killer"),
    ("mpirun noticed that the job aborted, but has no info as to the process", "launcher_exit_report"),
    ("A daemon (pid 8793) died unexpectedly with status 127 while attempting", "launcher_exit_report"),
    ("A daemon (pid unknown) died unexpectedly on signal 1  while attempting to launch so we are aborting.",
     "launcher_exit_report"),
    ("[1,0]<stderr>:Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to "
     "allreduce, allgather or broadcast a tensor after one of the ranks finished execution.", "hccl_generic"),
    ("Fatal error in MPI_Init: Other MPI error, error stack:", "hccl_generic"),
    ("hccl interface return err ./common/src/hccl_test_common.cc:538, retcode: 7", "code_hccl_hccl"),
    ("    [ERROR] RUNTIME(227839,rtstest_host):2026-07-13-11:39:20.982.674 [api_c.cc:1713]227839 rtModelExecute:"
     "ErrCode=207005, desc=[driver error:resource alloc fail], InnerCode=0x7020023", "code_acl_device"),
    ("[ERROR]HCCL(3729526,python3.11):2025-10-23-17:30:40.099.063 [externalinput.cc:47] [3729526][InitExternalInput]"
     "init failed", "hccl_generic"),
    ("[ERROR] HCCL(144905,python):2025-04-20-00:26:54.435.048 [config.cc:413] [145735][InitGroupStage]"
     "[RanktableCheck]rank[0] device ip family[2] is not same as others[10].", "hccl_generic"),
    ("[ERROR] HCCL(17528,python3):2026-03-18-10:34:43.142.152 [hccl_comm.cc:306] [18111][HcclComm]"
     "[HcomAllReduce_66_0]errNo[0x0000000000000009] index[0]", "hccl_generic"),
    ("[ERROR] AICPU(26533,aicpu_scheduler):2025-02-25-18:40:56.176.403 [silent_check_v3.cc:250][ComputeL1Error]"
     "[tid:26552]SilentCheckV3 ComputeL1Error:val = [nan], max = [nan], avg=[1.128970e-09], step=[5]", "nan_generic"),
    ("[WARNING] DEBUG(2950752,fffee7e591e0,python):2025-08-26-10:46:26.665.782 [silent_detector.cc:109] SilentDetect] "
     "Silent detect strike detected: StrikeRecord{timestamp: 1756176386, name: fc1.weight, value: nan, stat: x}",
     "nan_generic"),
])
def test_the_rounds_wordings(engine: str, line: str, rule: object) -> None:
    fired = rules_on(line, engine)
    assert (rule in fired) if rule else not fired, fired


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    "=   EXIT CODE: 0",                                                         # Hydra's clean end
    "EXIT CODE: 139 is 128 + SIGSEGV",                                          # not the box's line
    "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Interrupt (signal 2)",   # Ctrl-C, a deliberate stop
    "Primary job terminated normally, but 0 processes returned",               # none returned non-zero
    "Process 0 exit with status code 0.",
    "Process 2 exit with status code 1.",                                       # Horovod elastic goes on without it
    "[1543445279.655409] [juno001:29049:0]       ib_iface.c:444  UCX  ERROR ibv_create_cq(cqe=256) failed: x",
    "INFO:torch.distributed.elastic.agent.server.api:Local worker group finished (SUCCEEDED). Waiting 300 seconds",
    "systemd-coredump[2345]: Process 1234 (python) of user 1000 terminated abnormally with signal 2/INT, processing...",
    "Out of memory error handling is described in the allocator's docs",
    "Epoch: [1/100][2000/2976] Loss 0.2331 Main Loss 0.2212 Accuracy 0.2679.",
    "a loss NaN check runs every step",
    "    grad_norm_before_clip = 12.5",
    "[INFO] HCCL(17528,python3):2026-03-18-10:33:52.113.650 [hccl_socket_manager.cc:624] connect timeout set to 120s",
    "[WARNING] HCCL(17528,python3):2026-03-18-10:33:52.113.650 [adapter.cc:1] retry after error 1 of 3",
    "[ERROR] HCCL(69395,python3):2024-04-08-02:55:04.903.554 [task_exception_handler.cc:454][69395]"
    "[TaskExceptionHandler][Callback]Task run failed, para information is notify id 0",  # the exact report's dump
    "[1506866470.744682] [host:1411:0]       ib_iface.c:100  UCX  WARN  IB: ibv_fork_init() was disabled or failed",
    "export NCCL_IB_TIMEOUT=22  # UCX ERROR handling mode",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Thu Feb 22 01:44:30 UTC 2024",
    "        rtMemQueueEnQueueBuff execute failed, reason=[hdc send msg fail][FUNC:FuncErrorReason]",
    "[INFO] RUNTIME(57096,python3.10):2025-05-12-20:55:44.705.031 [task_info.cc:1270] exception handler registered",
    # Windows' WSAEADDRNOTAVAIL for one of the host name's addresses: the store connects on the next
    "[W socket.cpp:601] [c10d] The client socket has failed to connect to [DESKTOP-1]:50067 (system error: 10049 - "
    "The requested address is not valid in its context.).",
    "Job entrypoint command failed with exit code 0",
    "GGML_ASSERT(x) is the macro's name",
    "NVML: GPU is lost is one of the return codes",                              # no `: GPU is lost` result
    "       AIV Kernel happen error, retCode=0x31.[FUNC:GetError][FILE:stream.cc][LINE:1183]",  # the echo of a reported error
    "SIGSEGV(11) handler installed",
    "crash reason: none",
    "systemd-oomd[588]: Considered 12 cgroups for killing, top candidates were:",
    "[ERROR] HCCL(123,python):2024-03-28-10:25:50.589.705 [topoinfo_exchange_base.cc:137][123]call trace: hcclRet -> 9",
    "[ERROR] HCCL(1,python):2024 [a.cc:1][1][Init]errNo[0x0000000000000000] done",
    "aclrtSetDevice ret = 0, deviceId=0",
    "CRITICAL 04-17 03:26:10 [core_client.py:269] Got fatal signal from worker processes, shutting down. See stack "
    "trace above for root cause issue.",                                        # vLLM says so for a Ctrl-C too
    "INFO:tensorflow:An error was raised while a session was being created. This may be due to a preemption. A new "
    "session will be created. Error: Horovod has been shut down. This was caused by an exception on one of the ranks",
    "Silent detect strike detected: StrikeRecord{timestamp: 1, name: fc1.weight, value: inf, stat: x}",  # fp16 overflow
    "Silent detect strike detected: StrikeRecord{timestamp: 1756176386, name: fc1.weight, value: 3.5, stat: x}",
    "[INFO] RUNTIME(57096,python3.10):2025-05-12 [api_c.cc:1713] rtModelExecute:ErrCode=0",
])
def test_their_look_alikes_stay_silent(engine: str, line: str) -> None:
    assert not rules_on(line, engine), line

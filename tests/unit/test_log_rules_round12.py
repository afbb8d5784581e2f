"""The twelfth round's wordings, read where the fifteenth blind set showed a kind missing: other
accelerators' stacks in their own words (AMD's kernel driver and ROCr runtime, Intel Gaudi's driver,
runtime and bridge, AWS Neuron's runtime and collectives, Moore Threads' driver, torch_xla on TPU),
Abseil's failure handler in its other forms, JAX's and Keras' NaN stops, IPython's header of any
exception. Each case runs on both engines; each kind has lines that look alike and
must stay silent (what the same stacks print on a healthy run or as an echo of the cause)."""

from __future__ import annotations

import pytest

from tests.rule_kit import ENGINES, rules_on


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule", [
    # Abseil's and glog's failure handlers; Gaudi's bridge
    ("*** SIGABRT received by PID 9361 (TID 9361) on cpu 40 from PID 9361; stack trace: ***", "crash_signal_dump"),
    ("*** SIGSEGV STACK OVERFLOW (see go/cppstackoverflow) received by PID 166152 (TID 166402) on cpu 22; stack trace: ***",
     "crash_signal_dump"),
    ("*** SIGTRAP received by PID 2911 (TID 2911) on cpu 3 from PID 2911; stack trace: ***", "crash_signal_dump"),
    ("Internal Error: Received signal - Segmentation fault", "crash_signal_dump"),
    # AMD: the GPU scheduler's ring timeout (old and new kernels), the shader sequencer, the IOMMU, ROCr
    ("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=159760, emitted seq=159762",
     "device_cuda_error"),
    ("amdgpu 0000:65:00.0: amdgpu: ring vcn_unified_1 timeout, signaled seq=2, emitted seq=6", "device_cuda_error"),
    ("[22340.220490] amdgpu: sq_intr: error, detail 0x00000000, type 1, sh 1, priv 1, wave_id 4, simd_id 0, wgp_id 0",
     "device_cuda_error"),
    ("HW Exception by GPU node-9 (Agent handle: 0x64ff272d8ab0) reason :GPU Hang", "device_cuda_error"),
    # Gaudi's driver and runtime; Moore Threads' driver; the Neuron runtime
    ("[   72.993269] habanalabs 0000:1a:00.0: Failed to initialize hl2. Device is NOT usable !", "device_generic"),
    ("[   72.993087] habanalabs hl2: Failed to communicate with Device CPU (CPU-CP timeout)", "device_generic"),
    ("habanalabs 0000:19:00.0: Failed to initialize hl0. Device 0000:19:00.0 is NOT usable !", "device_generic"),
    ("habanalabs 0000:19:00.0: Failed to communicate with ARM CPU (ArmCP timeout)", "device_generic"),
    ("HCCL demo error: In function initDevice(): synDeviceAcquire(&resources.deviceHandle, nullptr) failed with "
     "synapse error: 20", "device_generic"),
    ("[24078.925037] MTGPU:(Error): 56377:  PID 1747 experienced error Guilty Lockup (0x1) caller[CheckFWCCB CTX Reset "
     "Noticication] [188]", "device_generic"),
    ("2022-Mar-29 07:07:29.0082    11:11    ERROR   NRT:nrt_init                                Unable to determine "
     "Neuron Driver version. Please check aws-neuron-dkms package is installed.", "device_generic"),
    ("2021-Nov-01 06:02:18.0992 13660:14125 ERROR  NMGR:dlr_infer                               Inference completed "
     "with err: 1004", "device_generic"),
    ('Execute failed: nrt_execute: status=1004, error message="Execution was completed with other errors".',
     "device_generic"),
    ('  (0) INTERNAL: Nrt::Load failed on NeuronCores 0-0(2): nrt_load status=1, error message="Non specific failure".',
     "device_generic"),
    # the Neuron runtime's own troubleshooting page
    ("2023-Jan-09 19:21:17.0000 2541:2541 ERROR   NRT:nrt_allocate_neuron_cores               NeuronCore(s) not "
     "available - Requested:nc1-nc1 Available:0", "device_generic"),
    ("2023-Jan-09 19:21:17.0000 2541:2541 ERROR   NRT:nrt_allocate_neuron_cores               Neuron cores are not "
     "contiguous", "device_generic"),
    ("2023-Jan-09 19:21:17.0000 2541:2541 ERROR  TDRV:translate_one_pseudo_instr_v2           Unsupported hardware "
     "operator code 214 found in neff.", "device_generic"),
    ("2023-Jan-09 19:21:17.0000 2541:2541 ERROR  TDRV:exec_consume_infer_status_notifications (FATAL-RT-UNDEFINED-STATE) "
     "inference timeout (600000 ms) on Neuron Device 0 NC 0", "device_generic"),
    # device memory: the Neuron runtime, Gaudi, torch_xla on TPU
    ("2024-Oct-15 18:01:17.728750  3882:3882  ERROR  TDRV:dmem_alloc_internal                     Failed to alloc DEVICE "
     "memory: 180355072", "oom_generic"),
    ("2024-Jul-30 14:22:31.305961 65191:69012 ERROR   NRT:nrt_infodump                            Failure: NRT_RESOURCE "
     "in nrt_load()", "oom_generic"),
    ("RuntimeError: FATAL ERROR :: MODULE:SYNHELPER workspace Allocation of size ::14493510400 failed!", "oom_generic"),
    ("RuntimeError: Resource exhausted: From /job:tpu_worker/replica:0/task:0:", "oom_xla"),
    ("Attempting to reserve 3.95G at the bottom of memory. That was not possible. There are 1.92G free, 0B reserved, "
     "and 1.92G reservable.;", "oom_xla"),
    # the Neuron and Gaudi collectives
    ("2023-Aug-01 16:12:43.0204 332066:332438 [21] bootstrap.cc:106 CCOM WARN Call to accept failed : Too many open files",
     "hccl_generic"),
    ("2025-Jan-16 00:39:18.628881 31598:33752 ERROR   ENC:enc_init_comm                           global comm (2) has "
     "less channels than this replica group (4)", "hccl_generic"),
    ("(RayTrainWorker pid=19045) [2023-11-02 13:17:59,227 E 19045 21937] logging.cc:97: Unhandled exception: "
     "N3c105ErrorE. what(): Collective call returned error", "hccl_generic"),
    # NaN stops: JAX's debug_nans, Keras' TerminateOnNaN
    ('\t"message": "invalid value (nan) encountered in jit(compiled_train_step). Because jax_config.debug_nans.value',
     "nan_anomaly_detected"),
    ("Batch 6: Invalid loss, terminating training", "nan_anomaly_detected"),
    # read from the sixteenth set once it had been scored: ROCr without its agent handle, amdgpu's failed ring
    # reset and its scheduler firmware, Kunlunxin's runtime and collectives, the Neuron status in a framework's
    # message and in its daemon's, its DRAM placement, PaddlePaddle's launcher, torch elastic's error file,
    # zsh's job report with its signal names, JAX's traceback header
    ("Memory access fault by GPU node-1 on address 0x1e4000. Reason: Page not present or supervisor privilege.",
     "device_cuda_error"),
    ("[127035.492298] amdgpu 0000:c5:00.0: amdgpu: Ring gfx_0.0.0 reset failed", "device_cuda_error"),
    ("[127037.563935] amdgpu 0000:c5:00.0: amdgpu: MES failed to respond to msg=REMOVE_QUEUE", "device_cuda_error"),
    ("[   92.344425] amdgpu 0000:45:00.0: amdgpu: MES(1) failed to respond to msg=REMOVE_QUEUE", "device_cuda_error"),
    ("[WARN][XPURT][xpu_llwait:675] ioctl() fail, (714) Exception in kernel execution", "device_generic"),
    ("[WARN][XPURT][xpu_launch_async:327] fail on kernel ty=CDNN name='_ZN4xpu29findmax1dIfEEvPKT_xPf' ncl=6 nco=8",
     "device_generic"),
    ('Internal: nrt::infer_wait failed with grpc status code 0, error message ""; nrt status code 1004, details '
     '"[NMGR:exec_wait] Inference completed with err: 1004', "device_generic"),
    ("1: [NRTD:infer_wait] error: 1004", "device_generic"),
    ("[TDRV:copy_and_stage_mr_one_channel] Failed to allocate aligned (0) buffer in MLA DRAM for W145-b of size "
     "4194304 bytes, channel 0", "oom_generic"),
    ("[23:35:17][node13.tjdm][4288][ERR][BKCL][init.cpp:1485] BKCL dont support send to one peer multi times in one group",
     "hccl_generic"),
    ("[23:35:17][node13.tjdm][4288][WARN][BKCL][bkcl.cpp:534] group_enqueue call failed, expected 0, error code=2",
     "hccl_generic"),
    ('    "message": "RendezvousClosedError: ",', "hccl_rendezvous_failed"),
    ("LAUNCH ERROR 2023-08-30 15:51:16,726 Container failed !!!", "launcher_failure_report"),
    ("LAUNCH INFO 2023-08-30 15:51:16,725 Pod failed", "launcher_failure_report"),
    ("Container rank 0 status failed cmd ['/usr/bin/python3.7', '-u', 'tools/train.py'] code 1 log output/workerlog.0",
     "launcher_failure_report"),
    ("[1]    18956 IOT instruction (core dumped)  /home/u/.conda/bin/python /home/u/GAN/main.py", "crash_shell_signal"),
    ("[2]  + 4012 segmentation fault  python train.py", "crash_shell_signal"),
    ("[1]  + 4012 killed     python train.py", "launcher_killed"),
    ("Memory access fault by GPU node-2 on address (nil). Reason: Unknown.", "device_cuda_error"),
    ("amdgpu 0000:c5:00.0: amdgpu: Ring gfx_0.0.0 reset failure", "device_cuda_error"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", "hccl_rendezvous_failed"),
    ("UnfilteredStackTrace                      Traceback (most recent call last)", "traceback_generic"),
    # IPython's and Jupyter's header of any exception
    ("FloatingPointError                        Traceback (most recent call last)", "traceback_generic"),
    ("RuntimeError                              Traceback (most recent call last)", "traceback_generic"),
])
def test_the_rounds_wordings(engine: str, line: str, rule: object) -> None:
    fired = rules_on(line, engine)
    assert rule in fired, fired


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    # a crash handler's words in prose and a signal that is not fatal
    "The handler prints *** SIGSEGV received by PID <pid> when a process crashes",
    "Received signal - SIGUSR1, reloading",
    # amdgpu on a healthy boot and the reset that echoes a fault already reported
    "amdgpu 0000:e3:00.0: amdgpu: MEM ECC is active.",
    "amdgpu 0000:65:00.0: amdgpu: ring vcn_unified_1 uses VM inv eng 0 on hub 1",
    "[Sat Jan  7 14:25:56 2023] amdgpu 0000:e3:00.0: amdgpu: GPU reset begin!",
    "AMD-Vi: Interrupt remapping enabled",
    # Gaudi's driver loading a card; Moore Threads' driver at info level
    "[   43.051361] habanalabs hl1: Successfully loaded firmware to device",
    "MTGPU:(Info): driver loaded, 1 device(s) found",
    # the Neuron runtime's facts dumped at its ERROR level after a failure, and its debug file
    "2024-Jul-30 14:22:31.252148 65191:69012 ERROR   NRT:nrt_infodump                            NRT version: 2.21.41.0",
    "2024-Jul-30 14:22:31.297781 65191:69012 ERROR   NRT:nrt_infodump                            Driver version: 2.17.17.0",
    "2024-Jul-30 14:22:30.261865 65191:65191 ERROR  TDRV:dml_dump                                Wrote nrt memory alloc "
    "debug info to /tmp/nrt_mem_log_device_0_66a8f726.csv",
    "2024-Jul-30 14:22:30.261865 65191:65191 INFO  NRT:nrt_init                                Neuron runtime started",
    "2025-Mar-13 22:49:59.915936 174766:174766 ERROR   NRT:nrt_close                               Unexpected runtime "
    "state: NRT_STATE_START",
    "2024-Jan-09 10:00:00.0000 2541:2541 ERROR  TDRV:tdrv_get_dev_info                       No neuron device available",
    # the Neuron collectives' plugin without EFA (one node goes on), and their timeouts while a graph compiles
    # elsewhere (not fatal: the runtime's troubleshooting page)
    "2024-May-21 16:14:20.0020 58091:58701 [0] init.cc:137 CCOM WARN OFI plugin initNet() failed is EFA enabled?",
    "2024-May-21 16:16:20.0121 58091:58701 [0] include/socket.h:541 CCOM WARN Timeout waiting for RX (waited 120 sec) "
    "- retrying, [bootstrapInit, rank: 0/8/-1]",
    # the IOMMU's page fault on a GPU's address while HIP samples pass (ROCm/ROCm#2820)
    "[283151.307378] amdgpu 0000:03:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000f address=0x6bfbb000 flags=0x0000]",
    # glog's header as a Markdown page escapes it (no process prints it)
    'The handler prints **\\* Aborted at 1 (unix time) when it crashes',
    # the c10d store's bind warnings before its own failure line (the earlier sets mark them ordinary)
    "[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    # a JAX flag's documentation; its warning before a rerun that may find no NaN and go on (jax-ml/jax#6482);
    # a Keras loss printed fine
    "Set jax_debug_nans=True to raise on invalid nan values encountered in jitted functions",
    "Invalid nan value encountered in the output of a C++-jit/pmap function. Calling the de-optimized version.",
    "Batch 6: loss 0.4312, continuing training",
    # a hardware error the hardware corrected (the kernel probe counts them), and the header every APEI report has
    "kernel: [ 2484.374029] {359}[Hardware Error]: event severity: corrected",
    "kernel: [ 2484.374025] {359}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 512",
    # a ring reset that worked, Kunlunxin's runtime and collectives at info level, a launcher's good end,
    # zsh's report of a job that ended well or was suspended
    "amdgpu 0000:c5:00.0: amdgpu: Ring gfx_0.0.0 reset succeeded",
    "[INFO][XPURT][xpu_init:120] device 0 opened",
    "[23:35:17][node13.tjdm][4288][INFO][BKCL][init.cpp:1485] BKCL init done",
    "LAUNCH INFO 2023-08-30 15:51:16,725 Pod completed",
    "[1]  + 18956 done       python main.py",
    "[1]  + 18956 suspended  python main.py",
    '    "message": "Worker group succeeded",',
    '    "message": "RendezvousGracefulExitError: ",',
    "torch.distributed.elastic.rendezvous.api.RendezvousGracefulExitError",
    "amdgpu 0000:c1:00.0: amdgpu: MES failed to respond to msg=MISC (WAIT_REG_MEM)",
    # a traceback header quoted in prose; a person's stop in a notebook
    "See the RuntimeError traceback (most recent call last) above",
    "KeyboardInterrupt                         Traceback (most recent call last)",
    "SystemExit                                Traceback (most recent call last)",
])
def test_their_look_alikes_stay_silent(engine: str, line: str) -> None:
    assert not rules_on(line, engine), line

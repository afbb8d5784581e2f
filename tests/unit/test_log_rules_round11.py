"""The eleventh round's wordings, read from the vendors' own texts where the thirteenth blind set
showed a kind missing: Kubeflow's, Ascend's and Kubernetes' exit reports, Slurm's accounting
states and its uncorrectable-memory cancel, MindIE's daemon, glibc's psiginfo, runc's OOM-killed
init, IPython's traceback header and PyTorch's memory summary, the NCCL heartbeat monitor and
socket connect, the driver's AI CPU error code, amdgpu's RAS and firmware reports,
NVIDIA's device plugin, TensorRT-LLM's runtime check, Lightning's and BigDL's loss; and, read
from their documentation with no set line in view, the schedulers' and orchestrators' own words for
a failed or killed job (Kubernetes' Job back-off limit, restart back-off and memory eviction, Docker Compose,
IBM LSF, PBS and Torque, Slurm's older memory kill and lost node). Each case runs on both engines;
each kind has lines that look alike and must stay silent, among them those an attack pass on the
round's first patterns found (systemd's verdicts on any unit, Docker Compose's 137, LSF's deliberate
kills, Kubeflow's retryable exit codes)."""

from __future__ import annotations

import pytest

from tests.rule_kit import ENGINES, rules_on


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, rule", [
    # Kubeflow's training operator and a pod's status as YAML
    ("INFO[0289] Pod: default.kfto-01-master-0 exited with code 1  job=default.kfto-01 replica-type=master",
     "launcher_exit_report"),
    ("2024-04-05T11:12:25-04:00\tDEBUG\tevents\tPyTorchJob kfto-01 is restarting because 1 Master replica(s) failed.",
     "launcher_exit_report"),
    ("job pytorch-simple is restarting because Worker replica(s) failed.", "launcher_exit_report"),
    ("AscendJob default-test is restarting because Worker replica(s) failed.", "launcher_exit_report"),
    ('job "default/x" is failing because "Worker" replica(s) failed.', "launcher_exit_report"),
    ("MPIJob x is failed because 1 Worker replica(s) failed.", "launcher_exit_report"),
    ("1.70e+09\tDEBUG\tevents\tError pod pytorch-simple-worker-0 container pytorch exitCode: 1 terminated message: ",
     "launcher_exit_report"),
    ("        exitCode: 2", "launcher_exit_report"),
    ("        exitCode: 137", "launcher_killed"),
    ("        exitCode: 139", "crash_rank_signal_exit"),
    # kubectl describe with a wide column
    ("      Exit Code:                1", "launcher_exit_report"),
    # Slurm's accounting states and the cancel of a step by an uncorrectable memory error
    ("2681683_420  entropy.sh     FAILED      1:0", "launcher_exit_report"),
    ("2681683_420+      batch     FAILED      1:0", "launcher_exit_report"),
    ("1234.0           python OUT_OF_ME+    0:125", "oom_host_oom_killer"),
    ("slurmstepd: error: *** STEP 12.0 ON n1 UNCORRECTABLE MEMORY ERROR AT 2026-01-08T21:23:49 ***",
     "device_host_hw_error"),
    # MindIE's daemon when a worker process exited
    ("[2025-10-29 10:01:06.167+08:00] [76758] [76760] [mindie-server] [ERROR] [llm_daemon.cpp:76] : [MIE04E010109] "
     "[daemon] Daemon wait pid with 76781 exit, Please check the service log or python log.", "launcher_exit_report"),
    # glibc's psiginfo in a crash handler's report
    ("Aborted (Signal sent by tkill() 1733323 1000)", "crash_shell_signal"),
    # runc's init killed at the memory limit; IPython's header of an OOM; PyTorch's memory summary
    ('Error: container create failed: time="2022-09-14T11:35:13Z" level=error msg="runc create failed: unable to '
     'start container process: container init was OOM-killed (memory limit too low?)"', "oom_container_killed"),
    ("ResourceExhaustedError                    Traceback (most recent call last)", "oom_cuda"),
    ("OutOfMemoryError                          Traceback (most recent call last)", "oom_cuda"),
    ("|            CUDA OOMs: 1            |        cudaMalloc retries: 1         |", "oom_cuda"),
    # the NCCL heartbeat monitor; NCCL's socket connect given up
    ("[rank7]:[E1019 01:04:03.357615073 ProcessGroupNCCL.cpp:1375] [PG 3 Rank 7] First PG on this rank that detected "
     "no heartbeat of its watchdog.", "hccl_pg_watchdog_hang"),
    ("node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> returned "
     "113(No route to host) errno 115(Operation now in progress)", "hccl_peer_connection_lost"),
    # (NCCL 2.24 on: `exceeded error retry count`, read by the generic NCCL WARN error shape)
    ("node5:240:240 [6] NCCL WARN socketPollConnect: connect returned No route to host, exceeded error retry count (35)",
     "hccl_call_failed"),
    # the driver's exception dump with the AI CPU's error code
    ("    Other info[0]:time=2024-09-19-11:09:15.032.209, function=proc_aicpu_task_done, line=970, error code=0x2a",
     "device_aicore_exception"),
    # amdgpu's RAS and power-management firmware; NVIDIA's device plugin
    ("[Sat Jan  7 14:25:56 2023] amdgpu 0000:e3:00.0: amdgpu: uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) "
     "detected!", "device_cuda_error"),
    ("[Sat Jan  7 14:25:59 2023] amdgpu 0000:e3:00.0: amdgpu: Failed to send message 0x26, response 0x0",
     "device_cuda_error"),
    ("2020/08/10 19:09:42 XidCriticalError: Xid=79 on Device=GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8, the device "
     "will go unhealthy.", "code_xid_device"),
    ("2020/08/10 19:09:42 'nvidia.com/gpu' device marked unhealthy: GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8",
     "device_cuda_error"),
    # TensorRT-LLM's check of a runtime call
    ("[TensorRT-LLM][ERROR] CUDA runtime error in cudaMemcpyAsync(dst, src.data(), src.getSizeInBytes(), "
     "cudaMemcpyDefault, mStream->get()): an illegal memory access was encountered (/workspace/bufferManager.cpp:146)",
     "code_cuda_device"),
    # Lightning's progress bar; a JVM trainer's infinite loss
    ("| 5880/8295 [04:01<01:39, 24.37it/s, v_num=0, learning_rate_step=0.0005, train_loss_step=nan.0]",
     "nan_loss_value"),
    ("2017-08-20 16:11:46 INFO  DistriOptimizer$:295 - [Epoch 64 740096/1281167] Train 1792 in 4.0seconds. Loss is "
     "Infinity. Current learning rate is 0.046.", "nan_loss_value"),
    # the schedulers' and orchestrators' documented words for a failed or killed job
    ("Warning  BackoffLimitExceeded  2m  job-controller  Job has reached the specified backoff limit",
     "launcher_exit_report"),
    ("Warning  BackOff  3m (x12 over 5m)  kubelet  Back-off restarting failed container pytorch in pod train-0",
     "launcher_exit_report"),
    ("train-1 exited with code 1", "launcher_exit_report"),
    ("train-1 exited with code 139", "crash_rank_signal_exit"),
    ("Exited with exit code 1.", "launcher_exit_report"),
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "launcher_exit_report"),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "oom_host_oom_killer"),
    ("=>> PBS: job killed: walltime 3610 exceeded limit 3600", "launcher_exit_report"),
    ("=>> PBS: job killed: mem 8123456kb exceeded limit 8000000kb", "oom_host_oom_killer"),
    ("slurmstepd: error: Job 1234 exceeded memory limit (8123456 > 8000000), being killed", "oom_host_oom_killer"),
    ("srun: error: Node failure on n12", "launcher_exit_report"),
    ("train-0                0/1     OOMKilled   2 (10s ago)   5m", "oom_container_killed"),
    ("Message: The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi.",
     "oom_container_killed"),
    # read from the fourteenth set's misses after it was scored: the device management library, the runtime's
    # chip version, the TS log's AI Core timeout, the aclnn status, HCCL's transport and graph task,
    # torch_memory_saver, the TPU runtime, spawn's SIGKILL, a launcher's `died from signal`, a named loss part
    ("dcmi model initialized failed, because the device is used. ret is -8020", "device_open_failed"),
    ("ERROR 05-09 08:06:34 [engine.py:448]         [Init][Version]init soc version failed, ret = 507008"
     "[FUNC:ReportInnerError][FILE:log_inner.cpp][LINE:145]", "device_open_failed"),
    ("[ERROR] TSCH(-1,null):2020-06-04-10:51:09.520.395 28 (cpuid:0) ai_core_dispatcher.c:1012 "
     "bs_done_exception_proc_timeout: slot_id=1,TS_ctrl=0x4", "device_ts_exception"),
    ("[Question]: RuntimeError: aclnnCausalConv1dGetWorkspaceSize failed with aclnnStatus=561002.", "code_aclnn_device"),
    ("        Transport init error. Reason: [Create] [DestLink]Create Dest error! createLink para:rank[5]", "hccl_init_failed"),
    ("        call hccl op:HcomAllReduce(HcomAllReduce) load task fail[FUNC:Distribute][FILE:hccl_task_info.cc]",
     "hccl_call_failed"),
    ("[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp func=resume line=172",
     "code_cuda_oom"),
    ("  (0) Failed precondition: The TPU system has not been initialized.", "device_cuda_error"),
    ("E0724 19:33:34.565000 128818126430656 torch/distributed/elastic/multiprocessing/api.py:702] "
     "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL", "launcher_killed"),
    ("rank 4 died from signal 9", "launcher_killed"),
    ("rank 0 died from signal 11 and dumped core", "crash_rank_signal_exit"),
    ("02:31:56: train iter: 100 loss_net: nan loss_scale: 785.4200 norm: nan norm_average: 0.8729", "nan_loss_value"),
])
def test_the_rounds_wordings(engine: str, line: str, rule: object) -> None:
    fired = rules_on(line, engine)
    assert rule in fired, fired


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    # a pod, a service and a job that ended well; a pod its restart policy recreates after a preemption (143)
    "INFO[0289] Pod: default.kfto-01-master-0 exited with code 0  job=default.kfto-01 replica-type=master",
    "Pod: default.pytorch-simple-worker-0 exited with code 143",
    "        exitCode: 0",
    "      Exit Code:                0",
    "systemd[1]: ollama.service: Main process exited, code=exited, status=0/SUCCESS",
    "systemd[1]: ollama.service: Deactivated successfully.",
    # systemd's verdicts name any unit of the host (fwupd/fwupd#4567: a refresh timer failing on every
    # install), and a stop past its timeout ends in SIGKILL (flux-framework/flux-core#4158)
    "fwupd-refresh.service: Main process exited, code=exited, status=1/FAILURE",
    "fwupd-refresh.service: Failed with result 'exit-code'.",
    "flux.service: Main process exited, code=killed, status=9/KILL",
    "train.service: Failed with result 'oom-kill'.",
    # `docker compose down` with a container that ignores SIGTERM (maildev/maildev#118)
    "attendize_mail_1 exited with code 137",
    "2681683_420  entropy.sh  COMPLETED      0:0",
    # the launcher ending the other ranks after the first one's exit (reported on that rank's line)
    "[2023-05-20 12:09:28,633] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 51386",
    "srun: error: nid002888: tasks 0-57,59-63: Terminated",
    "slurmstepd: error: *** STEP 3495064.0 ON orion-01-01 CANCELLED AT 2021-10-27T19:35:36 ***",
    # a healthy memory summary; a container that started
    "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |",
    "Normal  Started  113s  kubelet  Started container pytorch",
    # an AI CPU task that ended well; amdgpu's corrected errors and a healthy device
    "    Other info[0]:time=2024-09-19-11:09:15.032.209, function=proc_aicpu_task_done, line=970, error code=0x0",
    "amdgpu 0000:e3:00.0: amdgpu: 2 correctable hardware errors detected in umc block",
    "2020/08/10 19:09:42 'nvidia.com/gpu' device marked healthy: GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8",
    # a healthy loss in a progress bar
    "| 5880/8295 [04:01<01:39, 24.37it/s, v_num=0, train_loss_step=0.412, train_loss_epoch=0.530]",
    "Loss is 1.2645824. Current learning rate is 0.04628416419774555.",
    # a job that ended well, a person's kill, a disk eviction, a restart policy in prose
    "train-1 exited with code 0",
    "Successfully completed.",
    "TERM_OWNER: job killed by owner.",
    "TERM_BUCKET_KILL: job killed with bkill -b.",
    "TERM_PREEMPT: job killed after preemption.",
    "=>> PBS: job ended normally",
    "Message: The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9Gi.",
    "train-0                1/1     Running     2 (10s ago)   5m",
    "backoffLimit: 4  # the Job is retried this many times before it is marked failed",
    # healthy counters, tables and states of the second batch's kinds, and what its attack pass found printed
    # on healthy nodes: /proc/vmstat's and memory.events' counters since boot, nvidia-smi's lifetime (Aggregate)
    # ECC count, DCGM's diagnostic on a busy GPU (NVIDIA/DCGM#224), the kubelet before the device plugin
    # registers after a reboot, the fusion engine's optional passes (it goes on), `uniq -c`, an old job listed
    "oom_kill 16",
    "oom 1",
    "            DRAM Uncorrectable            : 1",
    "| GPU Memory                | Fail - GPU: 0                                  |",
    "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu",
    '[ERROR] FE(7924,demo):2023-04-05 [fusion_pass_manager.cc:164]7924 OpenPassPath:"[GraphOpt][Init][OpenPassPath] '
    'Failed to open the fusion pass so [/usr/local/Ascend/latest/opp/fusion_pass/built-in]"',
    "     12 nan",
    "old-exp-0412   Failed   12d",
    "            SRAM Uncorrectable            : 0",
    "3     NaN",
    "02:31:56: train iter: 100 loss_net: 2.4311 loss_scale: 785.4200 norm: 0.91",
    "pytorchjob   Succeeded   12m",
    "rank 4 exited normally",
    "dcmi model initialized successfully",
    "[INFO] TSCH ai_core_dispatcher.c:1012 bs_done_proc: slot_id=1",
])
def test_their_look_alikes_stay_silent(engine: str, line: str) -> None:
    assert not rules_on(line, engine), line

"""The blind sets 2-20 (tests/samples/blind2 ... blind20): public failure reports gathered by people
who saw only rule ids, categories and one-line meanings, each scored once before and once after a
round of rule work it was never tuned to (docs/log-signatures.md reports every score). Each set's
numbers are held here as a floor (failure lines reported) and a ceiling (unexpected alarms,
alarms on near-miss lines): a later change may only do better. Where a set's misses were read
afterwards (it is then no longer blind) the held numbers are the ones after that work, and the
comment says what changed. (The first blind set has its own test, test_blind_set.py.)"""

from __future__ import annotations

from typing import Dict

import pytest

from tests.blind_kit import assert_no_ground_lost, samples
from tests.helpers import TESTS
from watchdog.logrules import corpus
from watchdog.logrules.model import build_ruleset

#: Per set: its size (failure lines, near-miss lines) and the numbers held.
HELD: Dict[str, Dict[str, int]] = {
    # Fourth round: 91 of 152 before (59.9 %), 98 after (64.5 %; 59 unexpected, 16 near-miss
    # alarms). Sixth round's wordings: 101 reported; 2 more unexpected alarms, each a repeat of a
    # line its block reports (torch_npu's `Some HCCL operations have failed or timed out`,
    # `ncclUnhandledCudaError` after NCCL's own report).
    # torch_npu's printed texts (the acl table's `printed`): 1 more, a repeated `[Error]:` line.
    # The fifth set's wordings: 3 more, failure lines filed under another kind than marked (sglang's
    # `Received sigquit from a child process` as a launcher report, `Killed` after a progress bar as a kill).
    # Seventh round's wordings (NCCL's result texts as Horovod prints them, the c10d store's errors): 103;
    # the vendors' fatal texts: 105.
    # The generic vocabulary rules (`*_generic`, developed with this set's misses in view):
    # 116, no alarm more (NCCL's socket WARN lines, NVRM's failed adapter start, `loss nan,`).
    # The generic rules' exception patterns anchored where a class may start (a review measured
    # 221-317 ms on a crafted 64 KiB line, now 25 ms): one line fewer (116 to 115).
    # The ninth round's generic shapes (CANN plog modules at ERROR, a runtime call's failed reason,
    # NCCL's CUDACHECK) and launcher reports (Open MPI's non-zero exit): 1 more unexpected alarms,
    # each a line under its block's reported first line or a launcher report the set marks ordinary.
    # The Windows store warning `(system error: 10049 - ...)` silent: one near-miss alarm and one unexpected alarm fewer.
    # The thirteenth round's third wordings (vLLM's negative KV cache): 118 (77.6 %).
    "blind2": {"failure_lines": 152, "near_lines": 125, "reported": 118, "unexpected": 65, "near_miss_alarms": 15},
    # Fifth round: 79 of 139 before (56.8 %), 97 after (69.8 %; 102 unexpected, 1 near-miss alarm:
    # NCCL's `WARN Failed to open libibverbs.so[.1]`, fixed since: 101 and 0). The sixth round read
    # its misses (no longer blind): 119 reported with 7 repeats more (`Some NCCL operations have
    # failed or timed out` on every rank, a second `Cuda failure 700`, XLA's `OP_REQUIRES failed`),
    # then 4 more repeats (torch elastic's `exitcode  : 1 (pid: N)` rows, a second watchdog end);
    # the attack pass took back anomaly mode's warning and vLLM's `Engine core proc ... died
    # unexpectedly` (printed at a normal end too): 117 and 111.
    # torch_npu's printed texts: 2 more, `[Error]:` lines under their block's numbered line.
    # The generic vocabulary rules (`*_generic`, developed with this set's misses in view): 118.
    # The ninth round's generic shapes (CANN plog modules at ERROR, a runtime call's failed reason,
    # NCCL's CUDACHECK) and launcher reports (Open MPI's non-zero exit): 6 more unexpected alarms,
    # each a line under its block's reported first line or a launcher report the set marks ordinary.
    "blind3": {"failure_lines": 139, "near_lines": 109, "reported": 118, "unexpected": 119, "near_miss_alarms": 0},
    # Sixth round, gathered while its first wording step (bf1859d) was written without reading it:
    # 108 of 188 before (57.4 %), 119 after (63.3 %), 49 unexpected, no near-miss alarm of 200. Its
    # misses were then read (no longer blind): 165 reported with 4 repeats more (the `what():` copy
    # of a watchdog's end, `exitcode  : 1 (pid: N)` rows); the attack pass took back anomaly mode's
    # warning and Ray's retried-task lines (`killed due to memory pressure`, `A worker died or was
    # killed`): 163 and 52.
    # torch_npu's printed texts (planned from this set's misses): 166.
    # The generic vocabulary rules (`*_generic`, developed with this set's misses in view): 172; 1 more
    # unexpected alarm, `RuntimeError: HCCL AllReduce & Reduce: Unsupported data type ...` filed as a
    # collective failure by `hccl_generic`, marked a traceback here.
    # The ninth round's generic shapes (CANN plog modules at ERROR, a runtime call's failed reason,
    # NCCL's CUDACHECK) and launcher reports (Open MPI's non-zero exit): 2 more unexpected alarms,
    # each a line under its block's reported first line or a launcher report the set marks ordinary.
    "blind4": {"failure_lines": 188, "near_lines": 200, "reported": 172, "unexpected": 55, "near_miss_alarms": 0},
    # Sixth round, gathered after its wording work and attack pass, never tuned to: 62 of 93 at the
    # round's start (14df4e0, 66.7 %), 66 after the third set's wordings (bf7818c), 73 after the
    # round's work (248062e, 78.5 %); 25 unexpected and no near-miss alarm of 98 at all three.
    # torch_npu's printed texts (planned from the fourth set's misses, added after this set's misses
    # had been listed, so not a blind figure): 74. Then this set's misses were read (no longer blind):
    # 84; 3 more unexpected alarms, repeats of lines their block reports (HCCL's `[TaskExecStage]
    # [Timeout]` lines, vLLM's second `Failed core proc(s)`).
    # Seventh round (the sixth set's misses): 1 more unexpected alarm, a failure line filed under
    # another kind than marked (torch_npu's `The Inner error is reported as above` as a device
    # fault, marked a traceback here; the sixth set marks the same words a device fault).
    # The generic vocabulary rules (`*_generic`), scored before this set's misses were read (a held-out
    # check of that work): 87 (93.5 %), no alarm more; then, its misses read, another process's
    # exception line inside a prefixed traceback: 88.
    # The ninth round's generic shapes (CANN plog modules at ERROR, a runtime call's failed reason,
    # NCCL's CUDACHECK) and launcher reports (Open MPI's non-zero exit): 1 more unexpected alarms,
    # each a line under its block's reported first line or a launcher report the set marks ordinary.
    # The second wordings' plog RUNTIME shape (a `failed` line at the ERROR level): 1 more, under a reported block.
    "blind5": {"failure_lines": 93, "near_lines": 98, "reported": 88, "unexpected": 31, "near_miss_alarms": 0},
    # Gathered at the round's end (after ef39449), never tuned to: 50 of 83 at the round's start
    # (14df4e0, 60.2 %), 60 at the fifth set's scoring (248062e, 72.3 %) and at the round's end
    # (ef39449, 72.3 %); no alarm on its 102 near misses at any of the three; 23, 29, 29 unexpected.
    # Seventh round: its misses were read (no longer blind): the CUDA runtime's printed texts (63),
    # then the wordings from its misses and the vendors' sources (70, 84.3 %), no alarm more.
    # The generic vocabulary rules (`*_generic`), scored before this set's misses were read (a held-out
    # check of that work): 75 (90.4 %), no alarm more.
    # The ninth round's generic shapes (CANN plog modules at ERROR, a runtime call's failed reason,
    # NCCL's CUDACHECK) and launcher reports (Open MPI's non-zero exit): 1 more unexpected alarms,
    # each a line under its block's reported first line or a launcher report the set marks ordinary.
    # The second wordings' plog RUNTIME shape: 2 more (`LaunchKernel failed.`, `... reason=fftsplus timeout`).
    # The eleventh round's AI CPU error code in the driver's exception dump: 78 (94.0 %).
    # The thirteenth round's torch.multiprocessing `ProcessRaisedException:` line: 79 (95.2 %); its
    # `terminate called recursively` (the set marks it a crash, the rule files it with C++'s terminate): 33 unexpected.
    "blind6": {"failure_lines": 83, "near_lines": 102, "reported": 79, "unexpected": 33, "near_miss_alarms": 0},
    # Gathered at the seventh round's start (at c05f391), before its rule work, never tuned to: 68
    # of 132 at the sixth round's start (14df4e0, 51.5 %), 72 before the work (c05f391, 54.5 %), 77
    # after its wordings (4dab1fc, 58.3 %), 76 after the attack pass (4859fa1, 57.6 %) and after the
    # vendors' fatal texts and their attack pass (the round's end); 19, 21, 21, 21 unexpected; alarms
    # on its 101 near misses: 1, 2, 2, 2 (the bar is none; not read, so the set stays blind).
    # Eighth round, the generic vocabulary rules (written without reading it, scored once after):
    # 81 (61.4 %), 22 unexpected, 3 near-miss alarms (one more: the ceiling moves up, said in
    # docs/log-signatures.md). Its misses were read after that score (no longer blind): the
    # generic rules' wider levels and forms and the code tables' contexts from them, 102 (77.3 %);
    # a runner's exit status of 128 + a fatal signal, 103 (78.0 %).
    # The ninth round's generic shapes (CANN plog modules at ERROR, a runtime call's failed reason,
    # NCCL's CUDACHECK) and launcher reports (Open MPI's non-zero exit): 1 more unexpected alarms,
    # each a line under its block's reported first line or a launcher report the set marks ordinary.
    # The twelfth round's zsh job report of a SIGKILL (`[1]    13708 killed     python whisper-jax.py`): a kill,
    # filed under `traceback` as `zsh: killed` always was, where the set marks `crash`: 1 more unexpected alarm.
    "blind7": {"failure_lines": 132, "near_lines": 101, "reported": 103, "unexpected": 24, "near_miss_alarms": 3},
    # Gathered in the eighth round (after its generic rules, 3603247), never read: 137 of 228 at the
    # round's start (634cb03, 60.1 %), 145 with the generic rules (3603247, 63.6 %), 146 at the
    # round's end (64.0 %); unexpected 25, 27, 27; alarms on its 112 near misses 2, 2, 2 (the bar is
    # none). Read in the ninth round (no longer blind): its misses, by kind, were looked up in the
    # vendors' own texts (launcher exit reports, Paddle's allocator, CANN plog modules, UCX, XLA's
    # coordination service, NVIDIA's GSP): 186 (81.6 %), 31 unexpected, 2 near-miss alarms; the Windows
    # store warning silent: 30 unexpected, 1 near-miss alarm. An attack pass took back Horovod's `Process 2 exit
    # with status code 1.` (its elastic driver prints it for a worker it drops while training goes on): 185.
    "blind8": {"failure_lines": 228, "near_lines": 112, "reported": 185, "unexpected": 30, "near_miss_alarms": 1},
    # Gathered at the ninth round's start, before its rule work, by people who saw only rule ids,
    # categories and one-line meanings (113 sources): 126 of 166 before (d32edbe, 75.9 %), 127 after
    # the round's wordings (76.5 %); unexpected 23 and 31; near-miss alarms 2 and 2 on 142 near misses.
    # After that score its unexpected alarms were read once: hccl_generic no longer takes `abnormal`
    # (`No abnormal periods were discovered`), 30. Then its misses were read (no longer blind) and looked up
    # in the vendors' texts (onnxruntime's `CANN failure N` as the acl table's code, ggml's `GGML_ASSERT(...)
    # failed`, NVML's `GPU is lost`, HCCL's FFTS+ task timeout, Ray Jobs' and submitit's failed job, an
    # exception carrying its cause's class) and the Windows store warning made silent: 138 (83.1 %), 28
    # unexpected, no near-miss alarm. The tenth round's wordings: 1 more unexpected alarm, a module's internal error
    # (`E89999: [PID: ...] op[Range], outSize ...`) inside a device block the set reports on its first line.
    "blind9": {"failure_lines": 166, "near_lines": 142, "reported": 138, "unexpected": 29, "near_miss_alarms": 0},
    # Gathered in the ninth round (from 9f86a3b on), never read: 157 of 248 at the round's start (d32edbe,
    # 63.3 %), 166 at the gathering's start (9f86a3b), 167 after the round's rules (f72bc8e, 67.3 %);
    # unexpected 9, 10, 10; alarms on its 254 near misses 0, 0, 0. Then read (no longer blind; the eleventh set
    # was gathered before): its misses looked up in the vendors' texts (PyTorch's and CANN's signal handlers,
    # asys's crash reason, systemd-oomd, Open MPI's daemon and silent-abort reports, vLLM's fatal signal, Horovod's
    # shut-down, MPICH's MPI_Init, the runtime's ErrCode= and a call's `ret = N`, plog lines without a space after
    # the level, HCCL's rank-table checks, the NPU's silent-data-corruption checks): 210 (84.7 %), 10 unexpected,
    # no near-miss alarm. An attack pass took back a call's `ret = N` (cost; handled codes), vLLM's `Got fatal
    # signal from worker processes` (a Ctrl-C prints it too) and MindSpore's strike on `inf`: 205 (82.7 %).
    # The eleventh round's second wordings (from the fourteenth set's misses): 208.
    "blind10": {"failure_lines": 248, "near_lines": 254, "reported": 208, "unexpected": 10, "near_miss_alarms": 0},
    # Gathered at the ninth round's end (from 28c95cd on), never read: 140 of 181 at the round's start (d32edbe,
    # 77.3 %), 145 where the gathering began (28c95cd, 80.1 %), 145 after the round's last wordings (80.1 %);
    # unexpected 40, 42, 42; alarms on its 190 near misses 0, 0, 0. Not read: it stays blind for the next round.
    # After the tenth round's wordings (written from the twelfth set's misses and the vendors' texts, this set
    # still unread): 145 (80.1 %), 42 unexpected, 0 near-miss alarms: no change. The eleventh round's first
    # wordings (from the thirteenth set's misses): no change. Its second (from the fourteenth set's misses, this
    # set still unread): 150 (82.9 %), 42 unexpected, 0 near-miss alarms. The twelfth round's (from the fifteenth
    # and sixteenth sets and their attack passes; this set still unread): 151 (83.4 %), no alarm more. The
    # thirteenth round's first wordings (from the seventeenth set): 151, no change. Then read (no longer blind;
    # the eighteenth and nineteenth sets were gathered first): vLLM's SIGQUIT handler, vllm-ascend's allocator code,
    # torch_npu's description after vLLM's logger, NVIDIA's driver falling off the bus in its other sentence, its
    # API mismatch and GSP heartbeat, Ray Jobs' failed job: 164 (90.6 %), no alarm more.
    "blind11": {"failure_lines": 181, "near_lines": 190, "reported": 164, "unexpected": 42, "near_miss_alarms": 0},
    # Gathered at the tenth round's start (3840ea9), before its rule work, by people who saw only rule ids,
    # categories and one-line meanings (89 sources): 126 of 163 (77.3 %), 16 unexpected, 0 alarms on 107 near misses.
    # Then read (no longer blind): its misses looked up in the vendors' texts (Kubernetes' OOMKilled and exit codes,
    # TensorFlow's RESOURCE_EXHAUSTED root errors, vLLM's dead-engine reports, the CUDA table's Paddle glog check,
    # the acl table's graph-engine lines, CANN's internal-error range of digit modules, the Vision SDK's ACL return
    # texts, fairseq's zero loss scale): 147 (90.2 %), 14 unexpected, no near-miss alarm. An attack pass took back
    # vLLM's `AsyncLLM output_handler failed.` (a clean stop by SIGTERM prints it too): 146 (89.6 %).
    "blind12": {"failure_lines": 163, "near_lines": 107, "reported": 146, "unexpected": 14, "near_miss_alarms": 0},
    # Gathered at the tenth round's end (4618555), never read (95 sources; its Ascend half small: the public
    # Ascend threads are nearly all in earlier sets): 85 of 126 at the round's start (3840ea9, 67.5 %) and at its
    # end (67.5 %); unexpected 7 and 7; alarms on its 147 near misses 0 and 0. It stayed blind until the next round.
    # Eleventh round: read (no longer blind), its misses looked up in the vendors' texts (Kubeflow's and
    # Kubernetes' exit reports, systemd's service verdicts, Slurm's accounting states, MindIE's daemon, glibc's
    # psiginfo, runc's OOM-killed init, IPython's OOM header, PyTorch's memory summary, the NCCL heartbeat monitor
    # and socket connect, the driver's AI CPU code, amdgpu, NVIDIA's device plugin, TensorRT-LLM, Lightning's
    # and BigDL's loss): 116 (92.1 %), 6 unexpected, no near-miss alarm. An attack pass took back systemd's
    # verdicts (in a journal they name every unit of the host): 114 (90.5 %).
    "blind13": {"failure_lines": 126, "near_lines": 147, "reported": 114, "unexpected": 6, "near_miss_alarms": 0},
    # Gathered at the eleventh round's start (5269f11), before its wordings, never read (83 sources, three
    # gatherers): 108 of 155 at the round's start (69.7 %) and at its end (69.7 %); unexpected 11 and 11;
    # alarms on its 129 near misses 0 and 0. Then read (no longer blind): its misses looked up in the vendors'
    # texts: 137 (88.4 %), 10 unexpected, no near-miss alarm; an attack pass took back the kinds healthy nodes
    # print too (memory.events and vmstat counters, nvidia-smi's lifetime ECC counts, DCGM's diagnostic, the
    # kubelet's no-healthy-device, the fusion engine's optional passes, a bare step and value, kubectl's job
    # listing): 124 (80.0 %). The thirteenth round's torch_npu description after vLLM's logger: 11 unexpected (a
    # second description line the set marks ordinary, under the first).
    "blind14": {"failure_lines": 155, "near_lines": 129, "reported": 124, "unexpected": 11, "near_miss_alarms": 0},
    # Gathered in the eleventh round after its first wordings (6cf4831), before its second, never read (129 sources;
    # its Ascend half mostly other accelerators' stacks, Gaudi, Trainium, TPU, Moore Threads): 87 of 211 at the
    # round's start (5269f11), after the first wordings and at the round's end (41.2 % at all three); unexpected
    # 11; alarms on its 193 near misses 0. Twelfth round: read (no longer blind), its misses looked up in the
    # emitters' own texts (AMD's driver and ROCr, Gaudi's driver, runtime and bridge, the Neuron runtime and
    # collectives, Moore Threads' driver, torch_xla on TPU, Abseil's and glog's handlers, JAX's and Keras' NaN
    # stops, IPython's header): 166 (78.7 %), 10 unexpected, no near-miss alarm. An attack pass took back what
    # healthy runs print too (the IOMMU's page fault on a GPU, JAX's warning before its de-optimized rerun, the
    # Neuron collectives' timeout while a graph compiles, glog's header as Markdown escapes it): 153 (72.5 %).
    # The thirteenth round's glibc assert(): 154 (73.0 %).
    "blind15": {"failure_lines": 211, "near_lines": 193, "reported": 154, "unexpected": 10, "near_miss_alarms": 0},
    # Gathered at the twelfth round's start (d25a82f), before its rules, never read (103 blocks, three gatherers:
    # an Ascend half, the neighbouring accelerators (ROCm, Kunlunxin, Neuron, TPU), CUDA-world and launchers):
    # 120 of 180 at the round's start (66.7 %), 127 after the round's wordings (70.6 %); unexpected 12 and 12;
    # alarms on its 134 near misses 2 and 2. Then read (no longer blind; a seventeenth set was gathered first):
    # ROCr without its agent handle, amdgpu's failed ring reset and its scheduler firmware, Kunlunxin's runtime
    # and collectives, the Neuron status in a framework's and its daemon's words, PaddlePaddle's launcher, torch
    # elastic's error file, zsh's job report, JAX's traceback header; APEI's corrected errors and its header
    # no longer page (the severity line decides): 148 (82.2 %), 13 unexpected (repeats of a reported line),
    # no near-miss alarm. The thirteenth round's amdgpu wordings (scheduler firmware, KFD): 150 (83.3 %).
    "blind16": {"failure_lines": 180, "near_lines": 134, "reported": 150, "unexpected": 13, "near_miss_alarms": 0},
    # Gathered in the twelfth round after its first wordings (ee505e9), before its second, never read (104 blocks;
    # 31 Ascend): 138 of 215 at the round's start (d25a82f, 64.2 %), 143 after the first wordings (66.5 %), 149
    # at the round's end (69.3 %); unexpected 14 at all three; alarms on its 127 near misses 0. Thirteenth round:
    # read (no longer blind; an eighteenth set was gathered first): amdgpu's command processor, scheduler and power
    # firmware, the DCMI library, shells in a Chinese locale, bash's two-space job report, an IDE's signal report,
    # PaddlePaddle's handler, Horovod's shut-down, TensorFlow's check_numerics, torch.multiprocessing's spawn,
    # MindSpore Serving: 178 (82.8 %), unexpected 14, no near-miss alarm. Left: `GPU reset begin!` (the earlier
    # sets mark it an echo), the Gloo pair's `Connection closed by peer` and the c10d store's read timeout (the
    # project's own near misses), a DataLoader's shm bus error (the earlier sets file it a crash), disk-full lines
    # (no rule files `other`). The round's attack pass took back what healthy runs print too (amdgpu's `Failed to
    # quiesce KFD` at exit, its busy power firmware, PaddlePaddle's banner that a SIGTERM prints too): 172 (80.0 %).
    "blind17": {"failure_lines": 215, "near_lines": 127, "reported": 172, "unexpected": 14, "near_miss_alarms": 0},
    # Gathered at the thirteenth round's start (8552706), before its rules, never read (109 blocks, 76 of them
    # failure reports; two gatherers: an Ascend and neighbouring-accelerators half, CUDA-world and launchers): 149
    # of 188 at the round's start (79.3 %; 148 at the twelfth round's start, d25a82f), 149 after its first
    # wordings (a32283a: nothing of this set's changed) and at its end; unexpected 7; alarms on its 141 near
    # misses 1 (3 at d25a82f: APEI's corrected errors, which the twelfth round silenced, were two). Failure reports
    # caught (`scan --report` from SOURCES.md's blocks): 69 of 76 (90.8 %) at all three. Then read (no longer blind):
    # its near-miss alarm was a later run's loss-scale peak carried back to an older run's line (fixed in
    # core/losscale.py); third wordings from its misses and the nineteenth set's: 168 (89.4 %), 6 unexpected, no
    # near-miss alarm; reports 74 of 76. After the round's attack pass (strace's delivered signal, MIOpen's search
    # log): 164 (87.2 %), reports 72 of 76.
    "blind18": {"failure_lines": 188, "near_lines": 141, "reported": 164, "unexpected": 6, "near_miss_alarms": 0},
    # Gathered in the thirteenth round after its first wordings (a32283a), before its second, never read (90 blocks,
    # 65 of them failure reports; an Ascend half from Chinese-language and vendor pages, a CUDA-world and launcher
    # half): 100 of 149 at the round's start (8552706, 67.1 %), after its first wordings and after its second
    # (4229626): nothing of this set's changed; unexpected 12; alarms on its 102 near misses 0. Failure reports
    # caught: 51 of 65 (78.5 %) at all three. Then read (no longer blind) with the eighteenth for the round's third
    # wordings: 118 (79.2 %), 9 unexpected, no near-miss alarm; reports 58 of 65. After the round's attack pass (a
    # single Kaldi job's failure, which retry.pl reruns): 117 (78.5 %), reports 58 of 65.
    "blind19": {"failure_lines": 149, "near_lines": 102, "reported": 117, "unexpected": 9, "near_miss_alarms": 0},
    # Gathered at the thirteenth round's end (d0c5287), after its last rule change, never read (81 blocks, 60 of them
    # failure reports; 26 of the Ascend half's 32 blocks from one repository's fault-diagnosis data; 82 near misses):
    # 111 of 145 (76.6 %; 109 at the round's start, 8552706), unexpected 25, alarms on its near misses 4 (4 at the
    # start). Failure reports caught: 55 of 60 (91.7 %) at both. It stays blind for the next round.
    "blind20": {"failure_lines": 145, "near_lines": 82, "reported": 111, "unexpected": 25, "near_miss_alarms": 4},
}


@pytest.mark.parametrize("folder", sorted(HELD))
def test_each_blind_set_is_the_one_scored(folder: str) -> None:
    rep = corpus.score(samples(folder), build_ruleset())
    assert (rep.failure_lines, rep.near_lines) == (HELD[folder]["failure_lines"], HELD[folder]["near_lines"])


@pytest.mark.parametrize("folder", sorted(HELD))
def test_no_later_change_loses_ground_on_a_blind_set(folder: str) -> None:
    assert_no_ground_lost(folder, HELD[folder])


#: Failure reports (the blocks each set's SOURCES.md lists with `file.log:START-END`, the sets from the
#: eighth on) and how many have a failure line reported in its own category, as of the thirteenth round's
#: end (`npu-watchdog scan --report tests/samples/<set>`): a floor, like the line counts above.
REPORTS: Dict[str, Dict[str, int]] = {
    "blind8": {"reports": 25, "caught": 22}, "blind9": {"reports": 80, "caught": 66},
    "blind10": {"reports": 99, "caught": 91}, "blind11": {"reports": 85, "caught": 79},
    "blind12": {"reports": 63, "caught": 57}, "blind13": {"reports": 61, "caught": 58},
    "blind14": {"reports": 75, "caught": 58}, "blind15": {"reports": 85, "caught": 74},
    "blind16": {"reports": 73, "caught": 69}, "blind17": {"reports": 78, "caught": 73},
    "blind18": {"reports": 76, "caught": 72}, "blind19": {"reports": 65, "caught": 58},
    "blind20": {"reports": 60, "caught": 55},
}


@pytest.mark.parametrize("folder", sorted(REPORTS))
def test_no_later_change_catches_fewer_failure_reports(folder: str) -> None:
    rep = corpus.score(samples(folder), build_ruleset())
    ranges = corpus.report_ranges((TESTS / "samples" / folder / "SOURCES.md").read_text(encoding="utf-8"))
    total, caught = corpus.reports_caught(rep, ranges)
    assert total == REPORTS[folder]["reports"]
    assert caught >= REPORTS[folder]["caught"], (caught, total)

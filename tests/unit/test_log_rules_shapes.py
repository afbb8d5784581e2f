"""The shapes the eighth round widened after reading the seventh blind set's misses (the lines are
that set's, `tests/samples/blind7/SOURCES.md` names their threads): an exception after a logging
format's separator, glog's error and fatal letters as an OOM line's level, memory killers outside
the kernel, GPU kernel drivers giving a card up, code-table contexts, a runner's exit status of
128 + a fatal signal. Each case runs on both engines; each kind has look-alikes that stay silent."""

from __future__ import annotations

import pytest

from tests.rule_kit import ENGINES, rules_on
from watchdog.logrules.model import build_ruleset

CATEGORY = {r.id: r.category for r in build_ruleset()}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line, category", [
    ("2024-11-07 12:55:24,870 - lmdeploy - ERROR - __init__.py:17 - ModuleNotFoundError: No module named 'dlinfer'",
     "traceback"),
    ("ValueError:Network outputs is NAN! Stop Training", "nan"),
    ("2022-03-07 18:41:42.980600: E external/org_tensorflow/tensorflow/compiler/xla/pjrt/pjrt_stream_executor_client.cc:2124]"
     " Execution of replica 0 failed: RESOURCE_EXHAUSTED: Failed to allocate request for 256.00MiB (268435456B) on device"
     " ordinal 0", "oom"),
    (": F tensorflow/core/common_runtime/gpu/gpu_device.cc:103] EigenAllocator for GPU ran out of memory when allocating 0."
     " See error logs for more detailed info.", "oom"),
    ("[Error]: Failed to apply for memory.", "oom"),
    ("[ERROR] DRV(41852,python3.7):2021-11-11-11:19:04.908.459 [ascend][curpid: 41852, 50983][drv][devmm]"
     "[devmm_alloc_managed 126]<errno:12, 6> heap_alloc_managed out of memory, pp=0x1, bytesize=15069901824.", "oom"),
    ('Aug 04 10:39:10 debian earlyoom[845]: sending SIGTERM to process 322603 uid 1000 "python3.13": oom_score 1282,'
     ' VmRSS 29931 MiB', "oom"),
    ("State: OUT_OF_MEMORY (exit code 0)", "oom"),
    ("(imitationRunner pid=37880) cannot allocate memory for thread-local data: ABORT", "oom"),
    ("[    5.119896] [drm:amdgpu_device_init [amdgpu]] *ERROR* hw_init of IP block <gfx_v11_0> failed -110", "device"),
    ("[    5.135530] amdgpu 0000:03:00.0: amdgpu: Fatal error during GPU init", "device"),
    ("[   60.063350] nvidia 0000:2c:00.0: probe with driver nvidia failed with error -1", "device"),
    ("            [ERROR]  Synchronize stream failed", "device"),
    ("        launch failed for Cast, errno:561000.", "device"),
    ("Warp CUDA error 700: an illegal memory access was encountered (/buildAgent/work/warp/native/warp.cu:223)", "device"),
    ("EZ9999  Cannot parse json for config file [/usr/local/Ascend/ascend-toolkit/latest/opp/built-in/op_impl/ai_core/"
     "tbe//kernel/config/ascend910/cast.json].", "device"),
    ("Error: Process completed with exit code 139.", "crash"),
    ("worker exited with status 134", "crash"),
])
def test_a_wider_shape_reports_its_category(engine: str, line: str, category: str) -> None:
    assert category in {CATEGORY[r] for r in rules_on(line, engine)}, rules_on(line, engine)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    # a bare OOM far from the level: hints and help texts
    "2022-04-04 00:27:49.642390: E tensorflow/compiler/xla/xla_client/xla_util.cc:88] Hint: If you want to see a list of"
    " allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation info.",
    # glog's info and warning letters are not levels of a failure
    "2025-03-17 17:48:09.854267: I tensorflow/stream_executor/cuda/cuda_driver.cc:739] failed to allocate 2.12G"
    " (2282521344 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    "W0101 12:00:00.000000 1234 allocator.cc:42] Allocator ran out of memory trying to allocate 1.2GiB; retrying",
    "earlyoom v1.7 starting: mem total: 64000 MiB, sending SIGTERM when mem <= 10.00%",
    "State: COMPLETED (exit code 0)",
    "[drm] Initialized amdgpu 3.54.0 20150101 for 0000:03:00.0 on minor 0",
    "[    4.000000] [drm:amdgpu_device_init [amdgpu]] *ERROR* nothing to report here",
    "Synchronize stream succeeded",
    "Process completed with exit code 0.",
    "exited with code 137",
    "Error: Process completed with exit code 1.",
])
def test_look_alikes_stay_silent(engine: str, line: str) -> None:
    assert not {CATEGORY[r] for r in rules_on(line, engine)} & {"oom", "device", "crash"}, rules_on(line, engine)


def test_a_user_rule_comes_before_the_generic_ones_and_cannot_be_one() -> None:
    """A line a user rule reports gets no generic match beside it (the generic rules fill only
    gaps), and a user rule cannot declare itself generic (its matches would never page)."""
    from watchdog.logrules.extract import Extractor, StreamState
    from watchdog.logrules.matcher import Matcher
    from watchdog.logrules.model import RuleError

    mine = {"id": "my_fatal", "category": "custom", "severity": "critical", "patterns": ["MY FATAL"],
            "literals": ["my fatal"], "title": "my fatal", "hint": "look"}
    rules = build_ruleset(user_rules=[mine])
    ex = Extractor(Matcher(rules))
    got = {e.rule.id for e in ex.feed(StreamState(), b"RuntimeError: MY FATAL device failed\n", None)}
    assert got == {"my_fatal"}, got
    with pytest.raises(RuleError, match="fallback"):
        build_ruleset(user_rules=[dict(mine, fallback=True)])

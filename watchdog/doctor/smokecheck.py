"""Verdicts of the `--smoke` run (pure): NPU results against the CPU reference, per device."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from watchdog.doctor.model import FAIL, PASS, SKIPPED, WARN, CheckResult

GROUP = "smoke"


def parse_smoke_output(stdout: str) -> Dict[str, Any]:
    """The smoke script prints one JSON object as its last line; anything else is noise from
    the import (CANN banners, warnings)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    raise ValueError("no JSON result line in the smoke script's output")


def evaluate_smoke(data: Dict[str, Any], min_cosine: float, max_abs_err: float,
                   expected: Optional[int] = None) -> List[CheckResult]:
    if not data.get("importable"):
        return [CheckResult(GROUP, "import", SKIPPED,
                            f"torch_npu not importable: {data.get('reason') or 'unknown reason'}",
                            "install torch_npu in the training interpreter and source the CANN set_env.sh",
                            details={"reason": data.get("reason")})]
    out = [CheckResult(GROUP, "import", PASS,
                       f"torch {data.get('torch')} / torch_npu {data.get('torch_npu')} import")]
    if data.get("error"):
        out.append(CheckResult(GROUP, "devices", FAIL, f"cannot enumerate NPUs: {data['error']}",
                               "check the driver and ASCEND_RT_VISIBLE_DEVICES"))
        return out
    devices = data.get("devices") or []
    if not devices:
        out.append(CheckResult(GROUP, "devices", FAIL, "torch_npu sees no NPU",
                               "check ASCEND_RT_VISIBLE_DEVICES and that the driver is loaded"))
        return out
    if expected is not None and len(devices) != expected:
        out.append(CheckResult(GROUP, "devices", WARN, f"torch_npu sees {len(devices)} NPU(s), {expected} expected",
                               "check ASCEND_RT_VISIBLE_DEVICES"))
    for dev in devices:
        idx = dev.get("index")
        name = f"npu{idx}"
        if dev.get("error"):
            out.append(CheckResult(GROUP, name, FAIL, f"npu:{idx} failed: {dev['error']}",
                                   "this device cannot run a forward pass: check its health and plog "
                                   "($HOME/ascend/log/debug/plog)", details=dev))
            continue
        problems = []
        for part in ("matmul", "layer"):
            r = dev.get(part) or {}
            cos, err = r.get("cosine"), r.get("max_abs_err")
            if cos is None or err is None or cos != cos or err != err:  # NaN never compares equal
                problems.append(f"{part} gave no number")
                continue
            if cos <= min_cosine:
                problems.append(f"{part} cosine {cos:.6f} <= {min_cosine}")
            if err >= max_abs_err:
                problems.append(f"{part} max abs err {err:.2e} >= {max_abs_err:.0e}")
        secs = dev.get("seconds")
        timing = f" in {secs:.2f}s" if isinstance(secs, (int, float)) else ""
        if problems:
            out.append(CheckResult(GROUP, name, FAIL, f"npu:{idx} differs from CPU: {'; '.join(problems)}",
                                   "wrong results on this device: check HBM ECC (`npu-smi info -t ecc`) and "
                                   "health before training on it", details=dev))
        else:
            mm, ly = dev["matmul"], dev["layer"]
            out.append(CheckResult(GROUP, name, PASS,
                                   f"npu:{idx} matmul cos {mm['cosine']:.6f} err {mm['max_abs_err']:.1e}, "
                                   f"layer cos {ly['cosine']:.6f} err {ly['max_abs_err']:.1e}{timing}",
                                   details=dev))
    return out

"""Run by `npu-watchdog doctor --smoke` inside the *training* interpreter.

For every NPU torch_npu sees: a small matmul and one small transformer encoder layer forward,
computed on the NPU and on the CPU from the same seeded inputs; prints the cosine similarity,
the maximum absolute error and the time per device as JSON. This is the only place the project
opens a device context (it costs device memory, so the daemon never does it).

Standalone: only torch, torch_npu and the standard library; Python 3.6+ syntax.
"""

import json
import sys
import time
import traceback


def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _compare(torch, ref, got):
    ref = ref.detach().double().flatten()
    got = got.detach().cpu().double().flatten()
    cos = torch.nn.functional.cosine_similarity(ref, got, dim=0).item()
    err = (ref - got).abs().max().item()
    return {"cosine": cos, "max_abs_err": err}


def _one_device(torch, index):
    device = "npu:%d" % index
    torch.npu.set_device(device)
    start = time.perf_counter()
    gen = torch.Generator().manual_seed(1234 + index)
    a = torch.randn(64, 64, generator=gen)
    b = torch.randn(64, 64, generator=gen)
    mm = _compare(torch, a @ b, (a.to(device) @ b.to(device)))

    torch.manual_seed(4321)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                             dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 16, 64, generator=gen)
    # Grad mode stays on so both sides take the same unfused path (the inference fast path
    # would compare two different kernels); results are detached before comparing.
    ref = layer(x).detach()
    got = layer.to(device)(x.to(device)).detach()
    torch.npu.synchronize()
    tl = _compare(torch, ref, got)
    return {"index": index, "matmul": mm, "layer": tl, "seconds": time.perf_counter() - start}


def main():
    try:
        import torch
        import torch_npu  # noqa: F401  (registers the npu device)
    except BaseException as exc:  # noqa: BLE001 - any import failure means "not importable"
        text = ("%s: %s" % (type(exc).__name__, exc)).strip().splitlines()
        _emit({"importable": False, "reason": text[0] if text else type(exc).__name__})
        return
    info = {"importable": True, "torch": getattr(torch, "__version__", None),
            "torch_npu": getattr(torch_npu, "__version__", None), "devices": []}
    try:
        if hasattr(torch.npu, "matmul") and hasattr(torch.npu.matmul, "allow_hf32"):
            torch.npu.matmul.allow_hf32 = False  # compare true fp32, not HF32
        count = torch.npu.device_count()
    except BaseException as exc:  # noqa: BLE001
        info["error"] = "%s: %s" % (type(exc).__name__, exc)
        _emit(info)
        return
    for index in range(count):
        try:
            info["devices"].append(_one_device(torch, index))
        except BaseException as exc:  # noqa: BLE001
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            info["devices"].append({"index": index, "error": last})
    _emit(info)


if __name__ == "__main__":
    main()

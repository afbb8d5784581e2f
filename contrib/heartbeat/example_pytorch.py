"""A plain PyTorch training loop with an npu-watchdog heartbeat (works the same with torch_npu).

Run one process per rank (torchrun sets RANK); each writes /tmp/hb/rank<RANK>.json. Point the
watchdog at it with `probes.heartbeat.paths: ["/tmp/hb/rank*.json"]`.
"""

from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heartbeat import Heartbeat  # noqa: E402


def main() -> None:
    import torch  # imported here so the heartbeat file itself never needs torch

    os.makedirs("/tmp/hb", exist_ok=True)
    hb = Heartbeat("/tmp/hb/rank{rank}.json", min_interval=10.0)   # phase "init" written now
    model = torch.nn.Linear(512, 512)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch_tokens = 32 * 512

    hb.phase_now("train")
    for step in range(1, 10_001):
        t0 = time.monotonic()
        x = torch.randn(32, 512)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        took = time.monotonic() - t0
        # .item() syncs the device once per step; training code usually does this for logging anyway.
        hb.beat(step=step, loss=loss.item(), grad_norm=float(grad_norm),
                tokens_per_s=batch_tokens / took if took > 0 else None)
        if not math.isfinite(loss.item()):
            hb.flush()          # make sure the NaN reaches the watchdog before anything else
        if step % 2000 == 0:
            with hb.phase("eval"):
                pass            # evaluate(model)
            with hb.phase("checkpoint"):
                torch.save(model.state_dict(), f"/tmp/ckpt-{step}.pt")
    hb.done()


if __name__ == "__main__":
    main()

"""A plain PyTorch training loop with an npu-watchdog heartbeat (works the same with torch_npu).

Install the helper once (`pip install ./contrib/heartbeat`), set NPU_WATCHDOG_HEARTBEAT=/data/hb/
in the job's environment and run one process per rank (torchrun sets RANK): each writes
/data/hb/rank<RANK>.json and its flight recorder /data/hb/rank<RANK>.json.ring.
"""

from __future__ import annotations

from npu_watchdog_heartbeat import Heartbeat, Pace


def main() -> None:
    import torch  # imported here so the heartbeat file itself never needs torch

    hb = Heartbeat(min_interval=10.0)     # path from NPU_WATCHDOG_HEARTBEAT; phase "init" written now
    model = torch.nn.Linear(512, 512)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch_tokens = 32 * 512

    pace = Pace()                         # tokens over the wall time between step ends
    hb.phase_now("train")
    pace.start()
    for step in range(1, 10_001):
        x = torch.randn(32, 512)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        # .item() syncs the device once per step; training code usually does this for logging anyway.
        hb.beat(step=step, loss=loss.item(), grad_norm=float(grad_norm), lr=opt.param_groups[0]["lr"],
                tokens_per_s=pace.step_end(batch_tokens))   # a NaN is written at once
        if step % 2000 == 0:
            with hb.phase("eval"):
                pass            # evaluate(model)
            with hb.phase("checkpoint"):
                torch.save(model.state_dict(), f"/tmp/ckpt-{step}.pt")
            pace.pause()        # eval and checkpoint time is not training throughput
    hb.done()


if __name__ == "__main__":
    main()

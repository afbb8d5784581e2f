"""A plain PyTorch loop with the heartbeat package (the three lines are marked)."""

import time

import torch

from npu_watchdog_heartbeat import Heartbeat, Pace          # line 1
from scenario import MIN_INTERVAL, PAUSE_SECONDS, SCENARIO

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
hb = Heartbeat(min_interval=MIN_INTERVAL, seed=0)          # line 2 (path from NPU_WATCHDOG_HEARTBEAT)
pace = Pace()
hb.phase_now("train")
pace.start()
step = 0
while not SCENARIO.finished():
    SCENARIO.load_delay()
    x = torch.randn(8, 16)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    shown = loss.item() + SCENARIO.loss_offset()
    hb.beat(step=step, loss=shown, lr=0.01, samples_per_s=pace.step_end(8))   # line 3
    if SCENARIO.pause_due():
        with hb.phase("eval"):
            time.sleep(PAUSE_SECONDS)
        with hb.phase("checkpoint"):
            torch.save(model.state_dict(), "ckpt.pt")
            time.sleep(PAUSE_SECONDS)
        pace.pause()
        SCENARIO.pause_done()
hb.done()

"""A real DeepSpeed engine (CPU accelerator, one process) with the heartbeat hook: two lines."""

import os
import socket
import time

import deepspeed
import torch

from npu_watchdog_heartbeat.deepspeed import watch                 # line 1
from scenario import MIN_INTERVAL, PAUSE_SECONDS, SCENARIO

with socket.socket() as s:          # a one-process "cluster" on a free local port
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", port), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
    os.environ.setdefault(key, value)
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
config = {"train_batch_size": 4, "gradient_accumulation_steps": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
real_save = engine.save_checkpoint


def slow_save(*args, **kwargs):  # a checkpoint to slow storage
    time.sleep(PAUSE_SECONDS)
    return real_save(*args, **kwargs)


engine.save_checkpoint = slow_save
hb = watch(engine, min_interval=MIN_INTERVAL)                      # line 2

while not SCENARIO.finished():
    for _micro in range(2):                                        # gradient accumulation
        SCENARIO.load_delay()
        loss = engine(torch.randn(2, 16)).pow(2).mean()
        engine.backward(loss + SCENARIO.loss_offset())   # a constant: NaN in the loss, not in the grads
        engine.step()
    if SCENARIO.pause_due():
        engine.eval()
        time.sleep(PAUSE_SECONDS)
        engine.train()
        engine.save_checkpoint("ckpt")
        SCENARIO.pause_done()
hb.done()

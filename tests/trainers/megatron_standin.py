"""A Megatron-style training run (the stand-in `megatron.training.training`, see standins/README.md)
with the heartbeat patch: two lines before `pretrain(...)`."""

import random
import time

from megatron.training import training

from npu_watchdog_heartbeat.megatron import patch                  # line 1
from scenario import MIN_INTERVAL, PAUSE_SECONDS, SCENARIO

patch(min_interval=MIN_INTERVAL)                                   # line 2


class Optimizer:
    lr = 3e-4
    loss_scale = 4096.0


class Model:
    """What the stand-in train loop calls; the loss is a decaying number, NaN in the NaN stage."""

    def __init__(self):
        self.saved_once = False

    def train_step(self, batch):
        SCENARIO.load_delay()
        loss = 2.0 / (1 + batch) + random.random() * 0.01 + SCENARIO.loss_offset()
        return {"lm loss": loss}, 0, 1.5, None

    def should_eval(self):
        return SCENARIO.pause_due()

    def should_save(self):
        return SCENARIO.pause_due()

    def evaluate(self):
        time.sleep(PAUSE_SECONDS)

    def save(self, iteration):
        time.sleep(PAUSE_SECONDS)
        SCENARIO.pause_done()

    def finished(self):
        return SCENARIO.finished()


def batches():
    n = 0
    while True:
        n += 1
        yield n


training.train(None, Model(), Optimizer(), None, batches(), None, None, None)   # phase `done` on return

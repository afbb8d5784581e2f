"""A MindSpore-style `Model.train` (the stand-in `mindspore.train`, see standins/README.md) with the
heartbeat callback and loss scaling: the callback goes into the callbacks list (two lines)."""

import random
import time
from types import SimpleNamespace

from mindspore.train import FixedLossScaleManager, Model, ModelCheckpoint

from npu_watchdog_heartbeat.mindspore import WatchdogCallback      # line 1
from scenario import MIN_INTERVAL, PAUSE_SECONDS, SCENARIO

BATCH = 8


def epoch_data(epoch):
    """Epoch 1 ends when the pause is due (validation follows); epoch 2 plays the rest."""
    n = 0
    while not (SCENARIO.finished() or (epoch == 0 and SCENARIO.pause_due())):
        SCENARIO.load_delay()
        n += 1
        yield n


def step(batch):
    loss = 2.0 / (1 + batch) + random.random() * 0.01 + SCENARIO.loss_offset()
    return (loss, False, 1024.0)        # TrainOneStepWithLossScaleCell's (loss, overflow, scale)


def evaluate(batch):
    time.sleep(PAUSE_SECONDS / 4)


def save(step_num):
    time.sleep(PAUSE_SECONDS + 0.5)     # the phase is declared half a second into a save


class Resume:
    """Marks the scenario's pause over when the second epoch begins."""

    def on_train_epoch_begin(self, run_context):
        if run_context.original_args().cur_epoch_num == 2:
            SCENARIO.pause_done()

    def __getattr__(self, name):
        return lambda run_context: None


class SaveAtPause(ModelCheckpoint):
    def on_train_epoch_end(self, run_context):
        if run_context.original_args().cur_epoch_num == 1:
            self.save_fn(run_context.original_args().cur_step_num)


hb_cb = WatchdogCallback(batch_size=BATCH, min_interval=MIN_INTERVAL)               # line 2
model = Model(step, evaluate, optimizer=SimpleNamespace(learning_rate=0.01),
              loss_scale_manager=FixedLossScaleManager(1024.0))
model.train(2, epoch_data, callbacks=[Resume(), hb_cb, hb_cb.checkpoint(SaveAtPause(0, save))],
            valid_dataset=[1, 2, 3, 4])
